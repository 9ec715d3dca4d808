"""The fake's servers: both dialects and the control port, hand-written HTTP/1.1 on one loop.

Keep-alive (llama.cpp's ``max`` requests per connection, idle connections closed after 5 s),
``Content-Length`` bodies and chunked SSE streams paced by ``--ttft`` / ``--gap``; ``GET /stats``
on the control port returns the per-dialect counters and the process CPU time.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import os
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from benchmarks.overhead.fake.dialect import (
    CLOSE,
    CREATED_BYTES,
    DATE_HOLE,
    ID_HOLE,
    Dialect,
    Reply,
)
from benchmarks.overhead.fake.llamacpp import LlamaCpp
from benchmarks.overhead.fake.script import Script, Settings
from benchmarks.overhead.fake.vllm import VllmChat

KEEPALIVE_TIMEOUT = 5.0  # cpp-httplib and uvicorn both close idle keep-alive connections after 5 s


class Clock:
    """The ``date`` header and ``created`` value, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self.date = b""
        self.created = b""

    def tick(self) -> None:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self.date = email.utils.formatdate(now, usegmt=True).encode()
            self.created = b'"created":%d' % now


class FakeUpstream:
    """Both dialects plus the control server, on one event loop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.script = Script.build(settings.tokens)
        self.llamacpp = LlamaCpp(self.script, settings)
        self.openai = VllmChat(self.script, settings)
        self.clock = Clock()
        self.servers: list[asyncio.Server] = []
        self.urls: dict[str, str] = {}
        self._idle: dict[asyncio.StreamWriter, float | None] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, host: str = "127.0.0.1", llamacpp_port: int = 0, openai_port: int = 0,
                    control_port: int = 0) -> dict[str, str]:
        for name, handler, port in (
                ("llamacpp", self._serve_factory(self.llamacpp), llamacpp_port),
                ("openai", self._serve_factory(self.openai), openai_port),
                ("control", self._control, control_port)):
            server = await asyncio.start_server(handler, host, port, backlog=4096)
            self.servers.append(server)
            self.urls[name] = f"http://{host}:{server.sockets[0].getsockname()[1]}"
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        return self.urls

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for server in self.servers:
            server.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1)

    def stats(self) -> dict[str, Any]:
        cpu = os.times()
        return {"llamacpp": self.llamacpp.stats.as_dict(), "openai": self.openai.stats.as_dict(),
                "cpu_s": cpu.user + cpu.system, "pid": os.getpid()}

    def _serve_factory(self, dialect: Dialect) -> Callable[
            [asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._connection(dialect, reader, writer)
        return handler

    async def _connection(self, dialect: Dialect, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        stats = dialect.stats
        stats.connections += 1
        stats.open += 1
        stats.max_open = max(stats.max_open, stats.open)
        served = 0
        idle = self._idle
        limit = self.settings.keepalive_max if isinstance(dialect, LlamaCpp) else 0
        try:
            while True:
                idle[writer] = time.monotonic()
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                idle[writer] = None
                method, path, length, client_close = parse_head(head)
                body = await reader.readexactly(length) if length else b""
                served += 1
                stats.requests += 1
                stats.paths[path] = stats.paths.get(path, 0) + 1
                reply = dialect.reply(method, path, body)
                close = client_close or reply.close or (limit > 0 and served >= limit)
                await self._send(dialect, writer, reply, close)
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            stats.open -= 1
            idle.pop(writer, None)
            writer.close()

    async def _sweep(self) -> None:
        """Close connections idle for ``KEEPALIVE_TIMEOUT`` (a timer per request costs more)."""
        while True:
            await asyncio.sleep(1.0)
            cutoff = time.monotonic() - KEEPALIVE_TIMEOUT
            for writer, since in list(self._idle.items()):
                if since is not None and since < cutoff:
                    writer.transport.abort()

    async def _send(self, dialect: Dialect, writer: asyncio.StreamWriter, reply: Reply,
                    close: bool) -> None:
        head = reply.head
        if close and not reply.close:
            keep = dialect.keep_alive_line()
            head = head.replace(keep, CLOSE) if keep else head + b"connection: close\r\n"
        head += b"\r\n"
        s = self.settings
        if reply.dynamic:
            self.clock.tick()
            rid = b"chatcmpl-%016x" % random.getrandbits(64)

            def fill(data: bytes) -> bytes:
                return data.replace(ID_HOLE, rid).replace(CREATED_BYTES, self.clock.created)
            head = head.replace(DATE_HOLE, self.clock.date)
        else:
            def fill(data: bytes) -> bytes:
                return data
        if reply.paced == 0 or (s.ttft == 0 and s.gap == 0):
            if reply.delay:
                await asyncio.sleep(reply.delay)
            writer.write(head + fill(reply.whole))
            await writer.drain()
            return
        pieces = reply.pieces
        first = reply.lead + 1
        last = reply.lead + reply.paced
        if s.ttft:
            await asyncio.sleep(s.ttft)
        writer.write(head + fill(b"".join(pieces[:first] if first < last else pieces)))
        await writer.drain()
        if first >= last:
            return
        for i in range(first, last - 1):
            if s.gap:
                await asyncio.sleep(s.gap)
            writer.write(fill(pieces[i]))
            await writer.drain()
        if s.gap:
            await asyncio.sleep(s.gap)
        writer.write(fill(b"".join(pieces[last - 1:])))
        await writer.drain()

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                _, _, length, close = parse_head(head)
                if length:
                    await reader.readexactly(length)
                data = orjson.dumps(self.stats())
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(data), data))
                await writer.drain()
                if close:
                    return
        except ConnectionError:
            pass
        finally:
            writer.close()


def parse_head(head: bytes) -> tuple[bytes, bytes, int, bool]:
    """Request line and the two headers that matter: (method, path, content-length, close)."""
    end = head.index(b"\r\n")
    method, target, version = head[:end].split(b" ", 2)
    lower = head[end:].lower().replace(b": ", b":")
    length = 0
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        length = int(lower[at + 17:lower.index(b"\r\n", at + 17)])
    if version == b"HTTP/1.0":
        close = b"\r\nconnection:keep-alive" not in lower
    else:
        close = b"\r\nconnection:close" in lower
    return method, target.split(b"?", 1)[0], length, close
