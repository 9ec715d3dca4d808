"""A fake llama.cpp server with ``slots`` parallel slots that records how many generations it is
sent at once: ``GET /props`` answers ``{"total_slots": slots}``, each ``POST`` is a generation,
counted in flight (``current``, ``peak``, ``requests``) from its request until its response
ends or its client closes.  ``mode`` ``final``: the recorded llama.cpp answer ``events``, one
every ``interval`` seconds; ``endless``: a token every ``interval`` until the client leaves.
Runs in a thread (:meth:`running`, from :class:`~tests.support.loopback_upstream.LoopbackUpstream`).
"""

from __future__ import annotations

import asyncio
import json
import threading

from tests.support.loopback_upstream import LoopbackUpstream, chunk, read_request


class SlotsUpstream(LoopbackUpstream):
    def __init__(self, slots: int, *, mode: str = "final", events: list[bytes] | None = None,
                 interval: float = 0.05) -> None:
        super().__init__(interval=interval, mode=mode, events=events)
        self.slots = slots
        self.current = 0
        self.peak = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.peak = self.current
            self.requests = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_request(reader)
        if head.startswith(b"GET "):
            body = json.dumps({"total_slots": self.slots}).encode() if head.startswith(b"GET /props") else b""
            status = b"200 OK" if body else b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
                         b"connection: close\r\n" + f"content-length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            return
        with self._lock:
            self.requests += 1
            self.current += 1
            self.peak = max(self.peak, self.current)
        try:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            n = 0
            while self.mode == "endless" or n < len(self.events):
                data = self.events[n] if self.mode == "final" else self._endless_event(n)
                writer.write(chunk(data))
                await writer.drain()
                n += 1
                await asyncio.sleep(self.interval)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            with self._lock:
                self.current -= 1
