"""An upstream llama.cpp stream that never ends: one token every 10 ms, records its close."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx


class EndlessUpstream(httpx.AsyncByteStream):
    def __init__(self) -> None:
        self.sent = 0
        self.closed_at: float | None = None
        self.five_sent = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        header = [200005, 17196, 200008]  # <|channel|>final<|message|>
        while True:
            tok = header[self.sent] if self.sent < len(header) else 13225  # 'Hello'
            self.sent += 1
            if self.sent >= 5:
                self.five_sent.set()
            yield b'data: ' + json.dumps({"content": "x", "tokens": [tok], "stop": False}).encode() + b"\n\n"
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        self.closed_at = time.monotonic()


def endless_transport(upstream: httpx.AsyncByteStream) -> httpx.MockTransport:
    """Generation requests get ``upstream``'s stream; discovery GETs (``/props``,
    ``/v1/models``) a 404, as from a server that does not say."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=upstream)
    return httpx.MockTransport(handler)
