"""A replica's gate for the whole machine (``serve --workers N`` without Redis): the workers'
side of :mod:`app.engine.gate_hub`.

:class:`MachineGate` is a :class:`~app.engine.admission.ReplicaGate` (the same slot reading,
bound, ``full`` and Gate contract) whose slots are taken in the machine's gate service, so a
replica bounded to B generations is sent at most B by all the workers together, not B per
worker.  :class:`GateClient` is the worker's one connection to the service, shared by its gates.

* A replica without a known bound never asks the service (no round trip); a bounded one makes
  one round trip per generation to be admitted (a grant at once, or "queued" then the grant) and
  one line, not answered, to give the slot back.
* The wait keeps the local gate's rules: first come first served over the machine, at most
  ``[limits] max_queue`` waiting for a replica (then 503 ``server_overloaded``), at most
  ``queue_timeout`` seconds (then 503); a client that leaves while waiting gives its place up
  (a grant crossing its release on the wire is freed by that release).
* A slot count read (the first time, every ``recheck``, or after a failure) is told to the
  service at once, not only with the next ask: a burst that arrived during the read has queued
  there under the older bound, and a raised bound grants it now.
* A worker killed: its connection closes and the service frees its slots and places at once.
* **The service unavailable** (refused, closed, or no answer to an admission within
  ``ack_timeout``, 1 s): each worker keeps to its share of the bound, ``ceil(bound / workers)``
  (at least 1), counting the slots it already holds, in its own queue (the same limits and
  timeout) — never unbounded, never a hang.  A prober reconnects every 50 ms and pings; once the
  service answers, the worker registers every slot it holds (held through the outage or taken
  in its share meanwhile), its local waiters move back to the machine's queue, and new requests
  go to the service again (a restarted service grants nothing for its first 0.5 s, while the
  workers register their slots).  A service that stops answering after having queued a request
  leaves that request to its ``queue_timeout`` (503).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from typing import Any

from app.core.errors import Overloaded
from app.core.json_lines import LinePeer
from app.engine.admission import ReplicaGate, SlotReader
from app.engine.gate_hub import GATES_ENV, GRANTED, MAX_LINE, QUEUED, REFUSED, WORKERS_ENV

log = logging.getLogger("ocm_gateway")
LOST = -1  # the connection closed before an answer
BUSY_SECONDS = 1.0  # how long the service's "busy" answer is believed (``full``, batch lines)


class GateUnavailable(Exception):
    """The machine's gate service cannot be used now: the worker keeps to its share."""


class _Ask:
    __slots__ = ("ack", "grant", "url")

    def __init__(self, loop: asyncio.AbstractEventLoop, url: str) -> None:
        self.url = url
        self.ack: asyncio.Future[int] = loop.create_future()  # the first answer's kind
        self.grant: asyncio.Future[bool] = loop.create_future()  # True: granted; False: lost


class _Connection(LinePeer):
    """A worker's connection: answers ``[id, kind, busy]``, a queued ask's grant later."""

    max_line = MAX_LINE
    name = "replica gates (the gate service's connection)"

    def __init__(self, client: GateClient) -> None:
        super().__init__()
        self.client = client
        self.asks: dict[int, _Ask] = {}
        self.closed = False

    def handle(self, msg: list[Any]) -> None:
        ident, kind, busy = msg
        ask = self.asks.get(ident)
        if ask is None:
            return
        self.client.busy[ask.url] = (busy == 1, time.monotonic())
        if kind != QUEUED:
            del self.asks[ident]
        if not ask.ack.done():
            ask.ack.set_result(kind)
        if kind == GRANTED and not ask.grant.done():
            ask.grant.set_result(True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for ask in self.asks.values():
            if not ask.ack.done():
                ask.ack.set_result(LOST)
            if not ask.grant.done():
                ask.grant.set_result(False)
        self.asks.clear()
        self.client._lost(self)

    def close(self) -> None:
        self.closed = True
        super().close()


class GateClient:
    """A worker's connection to the machine's gates (see the module docstring)."""

    def __init__(self, path: str, workers: int, *, ack_timeout: float = 1.0, probe: float = 0.05) -> None:
        self.path = path
        self.workers = max(1, workers)
        self.ack_timeout = ack_timeout
        self.probe_every = probe
        self.held: dict[int, str] = {}  # id -> url: every slot this worker holds, however taken
        self.busy: dict[str, tuple[bool, float]] = {}  # url -> the service's last "busy", when
        self._conn: _Connection | None = None
        self._connecting: asyncio.Task[_Connection] | None = None
        self._down = False  # the service failed: each gate keeps to its share until it answers
        self._prober: asyncio.Task[None] | None = None
        self._back: asyncio.Future[None] | None = None
        self._ids = itertools.count(1)

    @property
    def up(self) -> bool:
        return not self._down

    def next_id(self) -> int:
        return next(self._ids)

    def busy_now(self, url: str) -> bool:
        busy, when = self.busy.get(url, (False, 0.0))
        return busy and time.monotonic() - when < BUSY_SECONDS

    def back(self) -> asyncio.Future[None]:
        """Done once the service answers again (at once when it does now)."""
        if self._back is None or self._back.done():
            self._back = asyncio.get_running_loop().create_future()
            if not self._down:
                self._back.set_result(None)
        return self._back

    async def _open(self, register: bool = True) -> _Connection:
        _, conn = await asyncio.get_running_loop().create_unix_connection(
            lambda: _Connection(self), self.path)
        if register:
            self._register(conn)
        return conn

    def _register(self, conn: _Connection) -> None:
        for ident, url in self.held.items():  # a restarted service learns what is still held
            conn.send_message(["h", ident, url])

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.get_running_loop().create_task(self._open())
        conn = await asyncio.shield(self._connecting)
        if self._conn is None or self._conn.closed:
            self._conn = conn
        return self._conn

    def _fail(self, why: str) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if not self._down:
            self._down = True
            log.warning("replica gates: the machine's gate service is unavailable (%s); each "
                        "bounded replica gets this worker's share of its bound until it is back", why)
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    def _lost(self, conn: _Connection) -> None:
        if conn is self._conn:
            self._fail("its connection closed")

    async def _probe(self) -> None:
        """Every ``probe_every`` seconds: connect, register what is held, ping; back once the
        service answers."""
        loop = asyncio.get_running_loop()
        while self._down:
            await asyncio.sleep(self.probe_every)
            conn: _Connection | None = None
            try:
                conn = await self._open(register=False)
                ping = _Ask(loop, "")
                ident = self.next_id()
                conn.asks[ident] = ping
                conn.send_message(["p", ident])
                async with asyncio.timeout(self.ack_timeout):
                    answered = await ping.ack
            except (OSError, TimeoutError):
                answered = LOST
            if answered != GRANTED:
                if conn is not None:
                    conn.close()
                continue
            assert conn is not None
            self._register(conn)  # every slot held now, however it was taken meanwhile
            self._conn, self._down = conn, False
            log.warning("replica gates: the machine's gate service answers again")
            if self._back is not None and not self._back.done():
                self._back.set_result(None)

    async def acquire(self, ident: int, url: str, bound: int, max_queue: int, deadline: float,
                      retry_after: float, read_at: float = 0.0) -> None:
        """A slot of ``url`` as slot ``ident`` (``bound`` as this worker read it at ``read_at``,
        ``time.monotonic()``); :class:`Overloaded` when the queue is full or none comes before
        ``deadline``, :class:`GateUnavailable` when the service is."""
        try:
            conn = await self._connection()
        except OSError as exc:
            self._fail(type(exc).__name__)
            raise GateUnavailable from None
        ask = _Ask(asyncio.get_running_loop(), url)
        conn.asks[ident] = ask
        conn.send_message(["q", ident, url, bound, max_queue, read_at])
        try:
            try:
                async with asyncio.timeout(self.ack_timeout):
                    kind = await ask.ack
            except TimeoutError:
                self._fail(f"no answer within {self.ack_timeout:g} s")
                raise GateUnavailable from None
            if kind == REFUSED:
                raise Overloaded(f"The backend at {url} is at capacity ({max_queue} requests waiting "
                                 f"for its {bound} slots); retry later.", retry_after=retry_after)
            if kind == QUEUED:
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        granted = await asyncio.shield(ask.grant)
                except TimeoutError:
                    if not (ask.grant.done() and ask.grant.result()):
                        conn.asks.pop(ident, None)
                        conn.send_message(["r", ident])  # its place given up (or the slot just granted)
                        raise Overloaded(f"The backend at {url} is at capacity: no slot within the "
                                         "queue timeout; retry later.", retry_after=retry_after) from None
                    granted = True
                if not granted:
                    raise GateUnavailable
            elif kind != GRANTED:  # LOST
                raise GateUnavailable
            self.held[ident] = url
        except asyncio.CancelledError:  # the client left: its place (or the slot) is given up
            conn.asks.pop(ident, None)
            conn.send_message(["r", ident])
            raise

    def tell(self, url: str, bound: int, read_at: float) -> None:
        """``url``'s bound just read (at ``read_at``): the service keeps it if it is the newest
        and grants its waiters now (they asked with the older one).  Lost with the service: the
        next ask carries it."""
        conn = self._conn
        if conn is not None and not self._down:
            conn.send_message(["b", url, bound, read_at])

    def hold(self, ident: int, url: str) -> None:
        """A slot taken without the service (this worker's share): told to it when it is there."""
        self.held[ident] = url
        conn = self._conn
        if conn is not None and not self._down:
            conn.send_message(["h", ident, url])

    def release(self, ident: int) -> None:
        if self.held.pop(ident, None) is None:
            return
        conn = self._conn
        if conn is not None:
            conn.send_message(["r", ident])  # else: freed when the connection closed

    async def aclose(self) -> None:
        self._down = False  # no more probing
        if self._prober is not None:
            self._prober.cancel()
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class MachineGate(ReplicaGate):
    """A replica's gate whose slots are the machine's (see the module docstring)."""

    def __init__(self, url: str, *, client: GateClient, fixed: int | None,
                 read_slots: SlotReader | None, margin: int, max_queue: int, queue_timeout: float,
                 recheck: float = ReplicaGate.RECHECK) -> None:
        super().__init__(url, fixed=fixed, read_slots=read_slots, margin=margin, max_queue=max_queue,
                         queue_timeout=queue_timeout, recheck=recheck)
        self.client = client
        self._bound: int | None = None
        self._held: list[int] = []  # the ids of the slots this worker holds here
        self._unbounded = 0  # slots taken while no bound was known (never told to the service)
        self.asking = 0  # waiting for the service's grant
        if fixed is not None:
            self._resize(fixed)

    @property
    def bound(self) -> int | None:
        return self._bound

    @property
    def full(self) -> bool:
        queue = self.queue
        return self._bound is not None and (
            queue.queued > 0 or self.asking > 0 or queue.inflight >= self._bound
            or self.client.busy_now(self.url))

    def _resize(self, bound: int) -> None:
        self._bound = bound
        self.queue.resize(max(1, math.ceil(bound / self.client.workers)))  # the share, without the service

    async def _read_slots(self) -> None:
        before = self.read_at
        await super()._read_slots()
        if self.read_at != before and self._bound is not None:  # read now: the machine learns it
            self.client.tell(self.url, self._bound, self.read_at)

    def _retry_after(self) -> float:
        bound = self._bound or 1
        return max(1.0, min(self.queue.queue_timeout, 1.0 + self.queue.max_queue / bound))

    async def acquire(self) -> None:
        await self.ready()
        bound = self._bound
        if bound is None:  # nothing known to share: no round trip
            await self.queue.acquire()
            self._unbounded += 1
            return
        deadline = time.monotonic() + self.queue.queue_timeout
        client = self.client
        while True:
            ident = client.next_id()
            if client.up:
                self.asking += 1
                try:
                    await client.acquire(ident, self.url, bound, self.queue.max_queue, deadline,
                                         self._retry_after(), self.read_at)
                except GateUnavailable:
                    pass
                else:
                    self.queue.take()  # counted here too: this worker's share if the service goes
                    self._held.append(ident)
                    return
                finally:
                    self.asking -= 1
            if await self._share(ident, deadline):
                return

    async def _share(self, ident: int, deadline: float) -> bool:
        """Wait in this worker's own queue for its share of the bound; False when the service
        answers again first (the caller asks it instead)."""
        back = self.client.back()
        got = asyncio.ensure_future(self.queue.acquire(max(0.0, deadline - time.monotonic())))
        try:
            await asyncio.wait((got, back), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if got.done() and not got.cancelled() and got.exception() is None:
                self.queue.release()  # granted as the client left: passed on
            else:
                got.cancel()
                await asyncio.gather(got, return_exceptions=True)
            raise
        if not got.done():
            got.cancel()
            await asyncio.gather(got, return_exceptions=True)
            if got.cancelled() or got.exception() is not None:
                return False
        got.result()  # Overloaded: the queue full or the wait ran out
        self.client.hold(ident, self.url)
        self._held.append(ident)
        return True

    def release(self, failed: bool = False) -> None:
        if failed:
            self._stale = True
        if self._unbounded:
            self._unbounded -= 1
        elif self._held:
            self.client.release(self._held.pop())
        self.queue.release()


def from_environment() -> GateClient | None:
    """The worker's connection to the machine's gates when ``serve`` started the service, else
    None (one worker, or Redis: each worker's gates are its own)."""
    path = os.environ.get(GATES_ENV)
    if not path:
        return None
    try:
        workers = int(os.environ.get(WORKERS_ENV, "2"))
    except ValueError:
        workers = 2
    return GateClient(path, workers)
