"""A client disconnect closes the upstream connection within 100 ms, for every adapter.

The upstream is a real loopback TCP server that streams a token every 10 ms forever
and records when its connection was closed.
"""

from __future__ import annotations

import httpx
import pytest

from app.main import create_app
from tests.support.asgi import AsgiPost, eventually
from tests.support.gateway import MODEL, config
from tests.support.loopback_upstream import LoopbackUpstream


@pytest.mark.parametrize("backend", ["llamacpp", "vllm", "ollama", "openai"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_disconnect_closes_upstream_quickly(backend: str, api: str) -> None:
    upstream = LoopbackUpstream(interval=0.01, dialect=backend)
    with upstream.running() as url:
        app = create_app(config(backend=backend, base_urls=[url]), transport=httpx.AsyncHTTPTransport())
        path = "/v1/chat/completions" if api == "chat" else "/v1/responses"
        payload = ({"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
                   if api == "chat" else {"model": MODEL, "stream": True, "input": "hi"})
        post = AsgiPost(path, payload, leave_after=5)
        async with app.router.lifespan_context(app):
            t_disconnect = await post.until_gone(app)
            await eventually(lambda: upstream.closed_at)
            admission = app.state.registry.admission
            await eventually(lambda: admission.inflight == 0)
    assert admission.inflight == 0 and admission.queued == 0, "the generation slot leaked"
    assert upstream.requests == 1 and post.body_chunks >= 5
    assert upstream.closed_at, "the upstream connection was never closed"
    assert upstream.closed_at[0] - t_disconnect < 0.1
