"""A client disconnect closes the upstream request (streaming and non-streaming).

The upstream here never finishes on its own: it streams a token every 10 ms
forever, so the test can only pass if the gateway closes it.  Driven at the ASGI
level so the disconnect is exactly the ``http.disconnect`` message a server sends.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from app.http.app import create_app
from tests.support.gateway import MODEL, config
from tests.support.slow_upstream import EndlessUpstream


def _scope(body: bytes) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5555),
            "server": ("gateway", 80),
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


async def _run(stream: bool) -> tuple[EndlessUpstream, float, list[dict[str, Any]]]:
    upstream = EndlessUpstream()
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=upstream))
    app = create_app(config(), transport=transport)
    body = json.dumps({"model": MODEL, "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    disconnect = asyncio.Event()
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if (message["type"] == "http.response.body" and b"Hello" in message.get("body", b"")) or (
                message["type"] == "http.response.body" and b'"content":"x"' in message.get("body", b"")):
            disconnect.set()

    async with app.router.lifespan_context(app):
        task = asyncio.ensure_future(app(_scope(body), receive, send))
        if not stream:
            await upstream.five_sent.wait()
            disconnect.set()
        await disconnect.wait()
        t_disconnect = time.monotonic()
        await asyncio.wait_for(task, timeout=5)
    return upstream, t_disconnect, sent


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
