"""Raw-asyncio HTTP/1.1 servers on loopback, for tests that control an upstream's bytes and
timing exactly (a chunked SSE body like llama.cpp's, a stall, a cut, keep-alive).

:func:`serving` answers every request of a connection with a test's handler (after reading it
into :attr:`Server.requests`); :func:`listening` runs a handler of whole connections as it is.
:class:`DropsReused` answers once per connection and drops the next request on it unanswered (a
server whose keep-alive timeout fired as the client reused the connection); :class:`DropsFirst`
drops every request unanswered (a server that died on it); :func:`stalls_after` and
:func:`cut_after` go silent or cut the connection after a first event.  :func:`nobody_listening` is a
loopback port that refuses connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and its ``content-length`` body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head, await reader.readexactly(length)


class Server:
    """Reads each request of a connection into :attr:`requests`, then lets the handler answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed_by_peer = asyncio.Event()
        self.requests: list[tuple[bytes, bytes]] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    self.requests.append(await read_request(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.closed_by_peer.set()
                    return
                await self.handler(reader, writer)
        finally:
            writer.close()


@asynccontextmanager
async def listening(serve: Handler, **server: object) -> AsyncIterator[str]:
    """``asyncio.start_server(serve, ...)`` on a loopback port (``server``: its other arguments,
    e.g. ``ssl``); yields ``http://127.0.0.1:PORT`` (``https``: with ``ssl``), closed afterwards."""
    srv = await asyncio.start_server(serve, "127.0.0.1", 0, **server)  # type: ignore[arg-type]
    scheme = "https" if server.get("ssl") else "http"
    try:
        yield f"{scheme}://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    finally:
        srv.close()


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[Server, str]]:
    server = Server(handler)
    async with listening(server._serve) as url:
        yield server, url


async def nobody_listening() -> str:
    """The URL of a loopback port that was just closed (nothing listens on it)."""
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    return f"http://127.0.0.1:{port}"


def stalls_after(event: bytes) -> Handler:
    """A handler that starts a chunked SSE answer with ``event``, then says nothing for 30 s."""

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(event))
        await writer.drain()
        await asyncio.sleep(30)

    return stall


def cut_after(event: bytes) -> Handler:
    """A handler that starts a chunked SSE answer with ``event``, then aborts the connection."""

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(event))
        await writer.drain()
        writer.transport.abort()

    return cut


class DropsReused:
    """Answers ``answer`` to a connection's first request, then aborts the connection once the
    next request on it arrives; :attr:`connections` counts the connections opened."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.connections = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await read_request(reader)
            writer.write(self.answer)
            await writer.drain()
            await read_request(reader)  # a second request on this connection: dropped unanswered
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.transport.abort()


class DropsFirst:
    """Aborts each connection once its first request arrived; :attr:`requests` counts them."""

    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        self.requests += 1
        writer.transport.abort()
