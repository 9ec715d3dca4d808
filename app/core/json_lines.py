"""One JSON-lines connection on a Unix socket, either end: the plumbing shared by the machine
services of ``serve --workers N`` (counters :mod:`app.http.machine_counters`, signals
:mod:`app.engine.signal_hub`, replica gates :mod:`app.engine.gate_hub`, the ``/metrics`` relay
:mod:`app.http.metrics_relay`) and by the workers' connections to them.  Each service keeps its
own messages; this module owns the framing and the rules for a broken peer.

Contract:

* The wire: one JSON value a line, ``\\n``-terminated (each service sends arrays); blank lines
  are skipped.  :meth:`LinePeer.handle` gets each line decoded, in arrival order, as soon as
  it is complete; a line arriving in pieces is not rescanned (:func:`split_lines`).
* A broken peer is cut off: a line that does not parse, one its handler rejects
  (``ValueError``, ``TypeError``, ``IndexError``, ``KeyError``), or an unfinished line over
  :attr:`LinePeer.max_line` bytes aborts the connection at once (nothing more is read from it
  or sent on it; the lines after the bad one are not handled), with one warning.
* :meth:`LinePeer.send` writes lines already framed, those sent while one chunk's lines are
  handled in one write after them (the same bytes, fewer system calls); on a closing
  connection they are dropped.
* :class:`LineClient`, a worker's end, adds requests answered by id: a line whose first element
  is an int answers the request of that id (in any order); any other line is a message for
  :meth:`LineClient.heard`.  The connection closing fails every request still waiting with
  ``ConnectionResetError``, and sets :attr:`LineClient.closed`.
* :class:`Dial` is a worker's one connection to a service, made when needed and kept open.
* :func:`text` and :func:`count` check a message's fields (TypeError: malformed).
* :func:`listen_unix` opens a service's socket (a stale one from a killed service replaced,
  mode 0600); :func:`close_unix` closes it and removes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

log = logging.getLogger("ocm_gateway")
MALFORMED = (ValueError, TypeError, IndexError, KeyError)  # what a handler raises on a bad message
RETRY_FIRST, RETRY_MOST = 0.05, 1.0  # a service away: reconnect after 50 ms, doubling up to 1 s


def split_lines(buffer: bytearray, data: bytes, limit: int) -> list[bytes] | None:
    """Add ``data`` to ``buffer``; the complete lines it now holds (removed from it), or None
    when an unfinished line is over ``limit`` (a broken peer).  Only ``data`` is searched for a
    newline: a long line arriving in pieces is not rescanned."""
    if b"\n" not in data:
        buffer += data
        return None if len(buffer) > limit else []
    lines = data.split(b"\n")
    if buffer:  # the first line's beginning came earlier
        buffer += lines[0]
        lines[0] = bytes(buffer)
        buffer.clear()
    buffer += lines.pop()  # the unfinished rest (usually nothing)
    return None if len(buffer) > limit else lines


class LinePeer(asyncio.Protocol):
    """Either end of one connection: lines split, bounded and decoded, handed to
    :meth:`handle`; a malformed one closes the connection (see the module docstring)."""

    max_line = 64 * 1024  # an unfinished line longer than this is a broken peer
    name = "machine service"  # who logs the warning

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] | None = None  # while lines are handled: what they send here

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        lines = split_lines(self.buffer, data, self.max_line)
        out: list[bytes] = []
        self._out = out
        try:
            if lines is None:
                raise ValueError("a line over the bound")
            for line in lines:
                if line:
                    self.handle(orjson.loads(line))
        except MALFORMED:
            log.warning("%s: a malformed line; closing that connection", self.name)
            self.close()
            return
        finally:
            self._out = None
        if out:
            self.write(b"".join(out))

    def handle(self, msg: list[Any]) -> None:
        """One decoded line; raise one of :data:`MALFORMED` to close the connection."""
        raise ValueError(msg)

    def send(self, data: bytes) -> None:
        """Send lines (framed); those sent while a chunk's lines are handled go in one write."""
        out = self._out
        if out is not None:
            out.append(data)
        else:
            self.write(data)

    def send_message(self, msg: list[Any]) -> None:
        """:meth:`send` ``msg`` as a line (inlined: it is on every request's path)."""
        line = orjson.dumps(msg) + b"\n"
        out = self._out
        if out is not None:
            out.append(line)
        else:
            self.write(line)

    def write(self, data: bytes) -> None:
        """Where bytes leave (a subclass that buffers or bounds its output overrides this)."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class LineClient(LinePeer):
    """A worker's end: requests answered by id, other lines to :meth:`heard`."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[int, asyncio.Future[list[Any]]] = {}
        self.closed = asyncio.Event()

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

    def expect(self, ident: int) -> asyncio.Future[list[Any]]:
        """The answer to request ``ident`` (the whole line), once it comes; the caller sends
        the request and drops the future from :attr:`waiting` if it stops waiting."""
        waiter: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.waiting[ident] = waiter
        return waiter

    async def request(self, msg: list[Any] | bytes, ident: int, within: float) -> list[Any]:
        """Send ``msg`` (a list, or its encoding without the newline) and wait up to ``within``
        seconds for its answer: TimeoutError, or ConnectionResetError when the connection
        closes first."""
        waiter = self.expect(ident)
        self.send((msg if isinstance(msg, bytes) else orjson.dumps(msg)) + b"\n")
        try:
            async with asyncio.timeout(within):
                return await waiter
        finally:
            self.waiting.pop(ident, None)

    def handle(self, msg: list[Any]) -> None:
        head = msg[0]
        if type(head) is int:  # an answer (not a bool)
            waiter = self.waiting.pop(head, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(msg)
        else:
            self.heard(msg)

    def heard(self, msg: list[Any]) -> None:
        """A line that is not an answer (a service that only answers sends none)."""
        raise ValueError(msg[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        for waiter in self.waiting.values():
            if not waiter.done():
                waiter.set_exception(ConnectionResetError(f"{self.name}: the connection closed"))
        self.waiting.clear()


Client = TypeVar("Client", bound=LineClient)


class Dial(Generic[Client]):
    """A worker's one connection to a service on the Unix socket ``path``: made when first
    needed (one attempt at a time, within ``timeout``: OSError or TimeoutError), made again
    once it has closed; :meth:`keep` keeps it open."""

    def __init__(self, path: str, protocol: Callable[[], Client], timeout: float) -> None:
        self.path, self.protocol, self.timeout = path, protocol, timeout
        self.current: Client | None = None
        self._lock = asyncio.Lock()

    async def __call__(self) -> Client:
        link = self.current
        if link is not None and link.alive:
            return link
        async with self._lock, asyncio.timeout(self.timeout):
            if self.current is None or not self.current.alive:
                _, self.current = await asyncio.get_running_loop().create_unix_connection(
                    self.protocol, self.path)
            return self.current

    async def keep(self, up: Callable[[], None] | None = None,
                   down: Callable[[Exception], None] | None = None) -> None:
        """Until cancelled: the connection made again as soon as it closes, every 50 ms then up
        to every second while the service is away; ``up`` after each connection made, ``down``
        at the first failure after one (or at the first of all)."""
        delay, failing = RETRY_FIRST, False
        while True:
            try:
                link = await self()
            except (OSError, TimeoutError) as exc:
                if not failing and down is not None:
                    down(exc)
                failing = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MOST)
                continue
            failing, delay = False, RETRY_FIRST
            if up is not None:
                up()
            await link.closed.wait()


def text(value: object) -> str:
    """A message's string field: ``value``, or TypeError (the message is malformed)."""
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def count(value: object) -> int:
    """A message's id, position or size: ``value`` if an int >= 0 (not a bool), or TypeError."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(value)
    return value


async def listen_unix(path: str, protocol: Callable[[], asyncio.Protocol]) -> asyncio.Server:
    """A server on the Unix socket ``path`` (mode 0600), a socket file left there replaced."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a socket left by a service that was killed
    server = await asyncio.get_running_loop().create_unix_server(protocol, path)
    os.chmod(path, 0o600)
    return server


def close_unix(server: asyncio.Server | None, path: str | None) -> None:
    """Close a server :func:`listen_unix` opened (None: none) and remove its socket file."""
    if server is None or not path:
        return
    server.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
