"""The load generator: a minimal raw-asyncio HTTP/1.1 keep-alive client, and what it needs to
read answers (the nearest-rank percentile, the text of a chat stream)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import orjson


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def sse_content(body: bytes) -> tuple[str, bool]:
    """The concatenated ``delta.content`` of a chat stream, and whether it ended with [DONE]."""
    text: list[str] = []
    done = False
    for block in body.split(b"\n\n"):
        if not block.startswith(b"data: "):
            continue
        data = block[6:]
        if data == b"[DONE]":
            done = True
            continue
        event = orjson.loads(data)
        for choice in event.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                text.append(content)
    return "".join(text), done


class RawClient:
    """A minimal HTTP/1.1 keep-alive client over asyncio streams (a connection pool per
    host:port; ``Content-Length`` and chunked bodies). On this 2-core machine httpx costs 1-6 ms
    of CPU per request, which would starve the gateway under load; this client costs ~0.1 ms
    (the ``client`` CPU column shows it)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self.connects = 0

    async def _acquire(self, host: str, port: int,
                       ) -> tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter], bool]:
        idle = self._idle.setdefault((host, port), [])
        while idle:
            conn = idle.pop()
            if not conn[0].at_eof():
                return conn, True
            conn[1].close()  # the server closed it while it was idle
        self.connects += 1
        return await asyncio.open_connection(host, port, limit=2**22), False

    async def post(self, host: str, port: int, request: bytes) -> tuple[int, bytes, float]:
        """Send a complete request; (status, body, perf_counter at the first body byte)."""
        for attempt in (0, 1):
            conn, reused = await self._acquire(host, port)
            reader, writer = conn
            try:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                lower = head.lower()
                parts: list[bytes] = []
                first = 0.0
                if b"\r\ntransfer-encoding: chunked" in lower:
                    while True:
                        size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";", 1)[0], 16)
                        if size == 0:
                            await reader.readuntil(b"\r\n")  # no trailers expected
                            break
                        parts.append((await reader.readexactly(size + 2))[:-2])
                        if not first:
                            first = time.perf_counter()
                else:
                    at = lower.find(b"\r\ncontent-length:")
                    length = int(lower[at + 17:lower.index(b"\r\n", at + 17)]) if at >= 0 else 0
                    parts.append(await reader.readexactly(length))
                    first = time.perf_counter()
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had just closed: once more
                raise
            if b"\r\nconnection: close" in lower:
                writer.close()
            else:
                self._idle[(host, port)].append(conn)
            return status, b"".join(parts), first
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
        self._idle.clear()
