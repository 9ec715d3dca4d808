"""Admission control: a bounded number of generations in flight, a bounded queue in front
of them, and a deadline in that queue; beyond either bound a request is refused at once with
a 503 and ``Retry-After`` instead of piling up.

Without it, load above the upstream connection pool queues inside httpcore, whose pool scans
every connection for every queued request: at 1,000 concurrent streams the event loop spent
its time there, ``/health`` went unanswered and clients that had gone were still sent
upstream. With it, at most ``max_inflight`` generations hold a connection, at most
``max_queue`` wait (FIFO, each for at most ``queue_timeout`` seconds), and a waiter whose
client disconnects leaves the queue (its wait is cancelled).

:class:`ReplicaGate` is the same queue in front of one upstream replica (the ``gate`` of its
:class:`adapters.routing.Replica`, shared by every model that names its URL): at most its
bound of generations are sent to it, the rest wait here, where a client that leaves costs the
backend nothing (queued in llama.cpp it would still cost a prompt evaluation), for at most
``queue_timeout`` seconds (then 503).  The bound is ``[models.X] max_inflight`` when set, else
for llama.cpp the replica's ``/props`` ``total_slots`` plus ``inflight_margin``: read before
the first request (which waits for it), then again in the background after a failure of the
replica (a restart may bring other slots) and every :attr:`ReplicaGate.RECHECK` seconds.  A
replica that reports no slots is not bounded; while none was ever read (a backend still loading
at start-up, or down when this process first asked) it is read again, waited for, at most every
:attr:`ReplicaGate.UNKNOWN_RECHECK` seconds, not left unbounded until the next
:attr:`RECHECK`.  :func:`bound_replicas` puts the gates on a
backend's replicas; with ``serve --workers N`` and no Redis they are
:class:`app.engine.machine_gate.MachineGate`, the same gate with its slots taken for the whole
machine.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable

from adapters.routing import ReplicaPool
from app.core.errors import Overloaded

log = logging.getLogger("ocm_gateway")

UNBOUNDED = 1 << 30  # a replica gate's bound before (or without) a slot count


class Admission:
    def __init__(self, max_inflight: int, max_queue: int, queue_timeout: float) -> None:
        self.max_inflight = max_inflight
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.inflight = 0
        self.on_reject: Callable[[], None] | None = None  # metrics hook
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def check(self) -> None:
        """Refuse now, before any work on the request, when every slot and the whole queue
        are taken (a request that passes still waits in :meth:`acquire`)."""
        if self.inflight >= self.max_inflight and len(self._waiters) >= self.max_queue:
            self._rejected()
            raise Overloaded(f"The gateway is at capacity ({self.inflight} generations running, "
                             f"{len(self._waiters)} waiting); retry later.",
                             retry_after=self._retry_after())

    def _retry_after(self) -> float:
        return max(1.0, min(self.queue_timeout, 1.0 + self.queued / max(1, self.max_inflight)))

    async def acquire(self, wait: float | None = None) -> None:
        """Wait for a generation slot (FIFO); :class:`Overloaded` when the queue is full or
        the wait exceeds ``wait`` seconds (default ``queue_timeout``). Every successful acquire
        needs one :meth:`release`."""
        if self.inflight < self.max_inflight and not self._waiters:
            self.inflight += 1
            return
        if len(self._waiters) >= self.max_queue:
            self._rejected()
            raise Overloaded(f"The gateway is at capacity ({self.inflight} generations running, "
                             f"{len(self._waiters)} waiting); retry later.",
                             retry_after=self._retry_after())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout if wait is None else wait)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return  # granted in the same instant the wait ran out: keep the slot
            waiter.cancel()
            self._rejected()
            raise Overloaded(f"The gateway is at capacity: no generation slot within "
                             f"{self.queue_timeout:g} s; retry later.",
                             retry_after=self._retry_after()) from None
        except asyncio.CancelledError:  # the client left while waiting
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over: pass it on
            else:
                waiter.cancel()
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _rejected(self) -> None:
        if self.on_reject is not None:
            self.on_reject()

    def take(self) -> None:
        """Count a slot granted elsewhere (the machine's gate), whatever the bound; released as
        any other."""
        self.inflight += 1

    def release(self) -> None:
        """Free a slot: hand it to the oldest live waiter, or count it free (always the latter
        while more are in flight than a lowered bound allows)."""
        if self.inflight <= self.max_inflight:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the slot passes on; inflight stays the same
                    return
        self.inflight -= 1

    def resize(self, max_inflight: int) -> None:
        """A new bound: more room is handed to the oldest waiters now; with less, the
        generations in flight finish and no new one starts until they are below it."""
        self.max_inflight = max_inflight
        while self.inflight < self.max_inflight and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.inflight += 1
                waiter.set_result(None)


SlotReader = Callable[[str], Awaitable[int | None]]


class ReplicaGate:
    """The bound of one upstream replica (see the module docstring); implements
    :class:`adapters.routing.Gate`."""

    RECHECK = 30.0  # seconds between two background reads of the slot count
    UNKNOWN_RECHECK = 1.0  # while no count was ever read (the backend still loading, or down)

    def __init__(self, url: str, *, fixed: int | None, read_slots: SlotReader | None, margin: int,
                 max_queue: int, queue_timeout: float, recheck: float = RECHECK) -> None:
        self.url = url
        self.queue = Admission(fixed or UNBOUNDED, max_queue, queue_timeout)
        self.slots: int | None = None  # as the replica last reported them
        self._read = read_slots if fixed is None else None
        self._margin = margin
        self._recheck = recheck
        self._checked: float | None = None  # when the slots were last read
        self.read_at = 0.0  # when the bound was last read successfully (0: configured, or never)
        self._stale = False  # the replica failed since
        self._reading: asyncio.Task[None] | None = None

    @property
    def bound(self) -> int | None:
        return None if self.queue.max_inflight >= UNBOUNDED else self.queue.max_inflight

    @property
    def full(self) -> bool:
        """Bounded, and every slot taken or someone waiting for one (a batch line waits)."""
        queue = self.queue
        return queue.max_inflight < UNBOUNDED and (queue.queued > 0 or queue.inflight >= queue.max_inflight)

    async def acquire(self) -> None:
        await self.ready()
        await self.queue.acquire()

    async def ready(self) -> None:
        """The slot count read when due (the first time, waited for)."""
        if self._read is not None:
            every = self._recheck if self.slots is not None else min(self._recheck, self.UNKNOWN_RECHECK)
            due = self._checked is None or self._stale or (time.monotonic() - self._checked >= every)
            if due and self.slots is None:
                await asyncio.shield(self._start_reading())  # never read: a burst must wait for it
            elif due:
                self._start_reading()  # meanwhile the bound read last holds

    def release(self, failed: bool = False) -> None:
        if failed:
            self._stale = True
        self.queue.release()

    def failed_elsewhere(self) -> None:
        """Another worker (or replica) saw this one fail: its slots are read again on the next
        request here too (a backend restarted with other slots; only the worker whose request
        failed would read them otherwise)."""
        self._stale = True

    def _start_reading(self) -> asyncio.Task[None]:
        if self._reading is None or self._reading.done():
            self._stale = False
            self._reading = asyncio.get_running_loop().create_task(self._read_slots())
        return self._reading

    async def _read_slots(self) -> None:
        assert self._read is not None
        try:
            slots = await self._read(self.url)
        except Exception:  # best effort, like every discovery read: the bound stays
            log.exception("reading the slots of %s failed", self.url)
            slots = None
        self._checked = time.monotonic()
        if slots is None or slots < 1:
            return
        self.read_at = self._checked  # the bound in force was confirmed now
        if slots == self.slots:
            return
        bound = slots + self._margin
        log.info("backend %s: %d slots, at most %d generations in flight to it", self.url, slots, bound)
        self.slots = slots
        self._resize(bound)

    def _resize(self, bound: int) -> None:
        self.queue.resize(bound)


def bound_replicas(pool: ReplicaPool, gates: dict[str, ReplicaGate], *, fixed: int | None,
                   read_slots: SlotReader | None, margin: int, max_queue: int,
                   queue_timeout: float, make: Callable[..., ReplicaGate] = ReplicaGate,
                   ) -> None:
    """Give each replica of ``pool`` its gate (one per URL in ``gates``, shared with other
    models naming the same URL, the first one's settings winning); nothing without ``fixed``
    or ``read_slots`` (the replicas keep no bound, as before).  ``make`` builds a gate (the
    machine's, :class:`app.engine.machine_gate.MachineGate`, with more than one worker)."""
    if fixed is None and read_slots is None:
        return
    for replica in pool.replicas:
        gate = gates.get(replica.url)
        if gate is None:
            gate = gates[replica.url] = make(
                replica.url, fixed=fixed, read_slots=read_slots, margin=margin,
                max_queue=max_queue, queue_timeout=queue_timeout)
        replica.gate = gate
