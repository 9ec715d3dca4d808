"""A raw-asyncio loopback HTTP server that streams llama.cpp ``/completion`` events forever.

Runs in a background thread so synchronous tests can use it; records when each
client connection closed.  Speaks just enough HTTP/1.1 (chunked transfer encoding).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

HEADER = [200005, 17196, 200008]  # <|channel|>final<|message|>


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request's head (its body, by ``content-length``, read and dropped)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return head


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a ``transfer-encoding: chunked`` body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class LoopbackUpstream:
    """``dialect``: ``llamacpp``, ``vllm``, ``openai`` (Chat Completions SSE) or ``ollama``
    (NDJSON).  ``mode``: ``endless`` (a token every ``interval`` forever), ``final`` (the recorded
    llama.cpp answer ``events``), ``error500``, ``stall`` (accepts, never answers), ``empty``
    (200 with an empty body),
    ``truncate`` (headers and ``truncate_after`` events, then the connection drops)."""

    def __init__(self, interval: float = 0.02, mode: str = "endless",
                 events: list[bytes] | None = None, truncate_after: int = 3,
                 dialect: str = "llamacpp", keep_alive: bool = False, pace: bool = False) -> None:
        self.interval = interval
        self.dialect = dialect
        self.mode = mode
        self.events = events or []
        self.truncate_after = truncate_after
        self.requests = 0
        self.connections = 0
        self.keep_alive = keep_alive
        self.pace = pace  # final / truncate: one event every ``interval`` instead of all at once
        self.closed_at: list[float] = []
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._serve(reader, writer)
            while self.keep_alive and self.mode == "final":  # HTTP/1.1 keep-alive: next request
                await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self.closed_at.append(time.monotonic())
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_request(reader)
        if head.startswith(b"GET /health"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                         b'content-length: 15\r\n\r\n{"status":"ok"}')
            await writer.drain()
            return
        if head.startswith(b"GET "):  # discovery (/props, /v1/models): not known here
            # Says it closes: a client must not reuse this connection for the next request.
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n"
                         + (b"" if self.keep_alive else b"connection: close\r\n") + b"\r\n")
            await writer.drain()
            return
        self.requests += 1
        if self.mode == "stall":
            await reader.read()  # never answers; returns when the client closes
            return
        if self.mode == "empty":  # 200, then the body ends before any event
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"content-length: 0\r\n\r\n")
            await writer.drain()
            return
        if self.mode == "error500":
            body = b'{"error":{"code":500,"message":"boom","type":"server_error"}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                         + f"content-length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            return
        ctype = b"application/x-ndjson" if self.dialect == "ollama" else b"text/event-stream"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: " + ctype +
                     b"\r\ntransfer-encoding: chunked\r\n\r\n")
        if self.mode in ("final", "truncate"):
            events = self.events if self.mode == "final" else self.events[:self.truncate_after]
            for data in events:
                writer.write(chunk(data))
                await writer.drain()
                if self.pace:
                    await asyncio.sleep(self.interval)
            if self.mode == "final":
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            else:
                writer.transport.abort()
            return
        n = 0
        while True:
            data = self._endless_event(n)
            writer.write(chunk(data))
            await writer.drain()
            n += 1
            await asyncio.sleep(self.interval)

    def _endless_event(self, n: int) -> bytes:
        """Event ``n`` of an endless answer in the backend's own stream framing."""
        tok = HEADER[n] if n < len(HEADER) else 13225  # 'Hello'
        event: dict[str, object] = {"content": "x", "tokens": [tok], "stop": False}
        if self.dialect == "vllm":
            event = {"choices": [{"index": 0, "text": "x", "token_ids": [tok], "finish_reason": None}]}
        elif self.dialect == "openai":
            event = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
        elif self.dialect == "ollama":  # NDJSON, not SSE
            return json.dumps({"model": "m", "message": {"role": "assistant", "content": "x"},
                               "done": False}).encode() + b"\n"
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    @contextmanager
    def running(self) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        server: list[asyncio.base_events.Server] = []

        async def serve() -> None:
            server.append(await asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = server[0].sockets[0].getsockname()[1]
            started.set()

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(serve(), loop)
        started.wait(10)
        try:
            yield f"http://127.0.0.1:{self.port}"
        finally:
            async def shutdown() -> None:
                server[0].close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
