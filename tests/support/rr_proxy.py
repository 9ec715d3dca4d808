"""Loopback TCP proxies for tests, and the connection splice they share.

:func:`splice` joins a client connection to a fresh connection to an upstream and pipes both
ways until either side closes (``on_sent`` sees each piece the client sent, as it passes).
:func:`round_robin` is a small round-robin proxy: each accepted connection goes to the next
backend in turn (a client that opens one connection per request spreads its requests over
every replica, as a load balancer would).  :mod:`tests.support.recording_proxy` splices too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                seen: Callable[[bytes], None] | None = None) -> None:
    try:
        while data := await reader.read(65536):
            if seen is not None:
                seen(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def splice(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int,
                 on_sent: Callable[[], Callable[[bytes], None]] | None = None) -> None:
    """Connect to ``host:port`` and pipe both ways until both directions end; a refused
    connection closes the client's.  ``on_sent``, called once connected, gives the callback that
    sees the client's bytes of this connection."""
    try:
        up_r, up_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(_pipe(client_r, up_w, on_sent() if on_sent else None), _pipe(up_r, client_w))


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
