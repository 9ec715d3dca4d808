"""A client disconnect closes the upstream request (streaming and non-streaming).

The upstream here never finishes on its own: it streams a token every 10 ms
forever, so the test can only pass if the gateway closes it.  Driven at the ASGI
level so the disconnect is exactly the ``http.disconnect`` message a server sends.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.main import create_app
from tests.support.asgi import AsgiPost
from tests.support.gateway import MODEL, config
from tests.support.slow_upstream import EndlessUpstream, endless_transport


async def _run(stream: bool) -> tuple[EndlessUpstream, float, list[dict[str, Any]]]:
    upstream = EndlessUpstream()
    transport = endless_transport(upstream)
    app = create_app(config(), transport=transport)
    def on_send(post: AsgiPost, message: dict[str, Any]) -> None:
        body = message.get("body", b"") if message["type"] == "http.response.body" else b""
        if b"Hello" in body or b'"content":"x"' in body:
            post.gone.set()

    post = AsgiPost("/v1/chat/completions", {"model": MODEL, "stream": stream,
                                             "messages": [{"role": "user", "content": "hi"}]}, on_send)
    async with app.router.lifespan_context(app):
        task = post.start(app)
        if not stream:
            await upstream.five_sent.wait()
            post.gone.set()
        await post.gone.wait()
        t_disconnect = time.monotonic()
        await asyncio.wait_for(task, timeout=5)
    return upstream, t_disconnect, post.sent


async def test_stream_disconnect_closes_upstream() -> None:
    upstream, t_disconnect, _ = await _run(stream=True)
    assert upstream.closed_at is not None, "upstream stream was never closed"
    assert upstream.closed_at - t_disconnect < 1.0
    produced = upstream.sent
    await asyncio.sleep(0.1)
    assert upstream.sent == produced  # nothing is pulled from upstream after the close


async def test_non_stream_disconnect_closes_upstream() -> None:
    upstream, t_disconnect, sent = await _run(stream=False)
    assert upstream.closed_at is not None, "upstream stream was never closed"
    assert upstream.closed_at - t_disconnect < 1.0
    # No answer was produced; the (unread) response is a 499 client_disconnected error.
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [499]
