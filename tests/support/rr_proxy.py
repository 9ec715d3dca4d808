"""Loopback TCP proxies for tests, the connection splice they share, and the thread that runs one.

:func:`splice` joins a client connection to a fresh connection to an upstream and pipes both
ways until either side closes; a :class:`Tap` sees each piece as it passes (before it is passed
on: it may hold the answer back) and hears when the connection ends.  :func:`round_robin` is a
small round-robin proxy: each accepted connection goes to the next backend in turn (a client
that opens one connection per request spreads its requests over every replica, as a load
balancer would).  :func:`in_a_thread` serves a connection handler from an event loop of its own
(a proxy a synchronous test, or a gateway in another loop, can use):
:mod:`tests.support.recording_proxy` and :mod:`tests.support.slot_proxy` splice on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Tap:
    """What a splice shows of one connection (this one sees nothing): ``sent`` gets each piece
    the client sends and ``received`` each piece the upstream answers, before it is passed on;
    ``closed`` is called once both directions have ended.  A tap that cannot parse what it sees
    raises ``ValueError``: that direction stops."""

    async def sent(self, data: bytes) -> None:
        pass

    async def received(self, data: bytes) -> None:
        pass

    def closed(self) -> None:
        pass


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                seen: Callable[[bytes], Awaitable[None]]) -> None:
    try:
        while data := await reader.read(65536):
            await seen(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def splice(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int,
                 tap: Callable[[], Tap] = Tap) -> None:
    """Connect to ``host:port`` and pipe both ways until both directions end; a refused
    connection closes the client's.  ``tap``, called once connected, gives the connection's
    :class:`Tap`."""
    try:
        up_r, up_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    seen = tap()
    try:
        await asyncio.gather(_pipe(client_r, up_w, seen.sent), _pipe(up_r, client_w, seen.received))
    finally:
        seen.closed()


@contextlib.asynccontextmanager
async def round_robin(backends: list[tuple[str, int]]) -> AsyncIterator[str]:
    """Listen on a loopback port; yields the proxy's base URL."""
    turn = itertools.cycle(backends)
    tasks: set[asyncio.Task[None]] = set()

    async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await splice(r, w, *next(turn))
        finally:
            tasks.discard(task)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()


@contextlib.contextmanager
def in_a_thread(handle: Handler, name: str) -> Iterator[str]:
    """Serve ``handle`` on a loopback port from an event loop in a thread of its own (``name``
    says what, should it not start within 10 s); yields the base URL, stops listening on exit."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        state["server"] = server
        state["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        started.set()
        async with server:
            with contextlib.suppress(asyncio.CancelledError):
                await server.serve_forever()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError(f"{name} did not start")
    try:
        yield state["url"]
    finally:
        loop.call_soon_threadsafe(state["server"].close)
        thread.join(10)
