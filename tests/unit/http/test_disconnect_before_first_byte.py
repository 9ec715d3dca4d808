"""A client that disconnects before the first byte cancels the upstream request at once,
and is never retried on another replica (real loopback upstreams that never answer)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.support.asgi import AsgiPost, eventually
from tests.support.gateway import MODEL, config
from tests.support.loopback_upstream import LoopbackUpstream

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_disconnect_while_waiting_for_the_first_byte(api: str, stream: bool) -> None:
    first, second = LoopbackUpstream(mode="stall"), LoopbackUpstream(mode="stall")
    with first.running() as url1, second.running() as url2:
        data = config().model_dump()
        data["models"][MODEL]["base_urls"] = [url1, url2]
        # A retry would go to the second replica after 0.4 s of silence from the first.
        data["upstream"].update({"attempt_timeout": 0.4, "first_byte_timeout": 10, "retry_backoff": 0})
        app = create_app(type(config()).model_validate(data), transport=httpx.AsyncHTTPTransport())
        path = "/v1/chat/completions" if api == "chat" else "/v1/responses"
        payload: dict[str, Any] = {"model": MODEL, "stream": stream}
        if api == "chat":
            payload["messages"] = [{"role": "user", "content": "hi"}]
        else:
            payload["input"] = "hi"
        post = AsgiPost(path, payload)
        async with app.router.lifespan_context(app):
            task = post.start(app)
            await eventually(lambda: first.requests, 1.0)  # the first replica holds the request
            await asyncio.sleep(0.1)
            post.gone.set()
            t_gone = time.monotonic()
            await asyncio.wait_for(task, timeout=5)
            await eventually(lambda: first.closed_at)
            await asyncio.sleep(0.6)  # past the point where a retry would have started
            pool = app.state.registry.routes[MODEL].backend.pool
            admission = app.state.registry.admission
    assert first.requests == 1 and first.closed_at, "the upstream request was not cancelled"
    assert first.closed_at[0] - t_gone < 0.3  # at once: a retry would start at 0.4 s
    assert second.requests == 0, "a request was retried for a client that had gone"
    assert [r.outstanding for r in pool.replicas] == [0, 0]
    assert (admission.inflight, admission.queued) == (0, 0), "the generation slot leaked"
