"""Admission control: a bounded number of generations in flight, a bounded queue in front
of them, and a deadline in that queue; beyond either bound a request is refused at once with
a 503 and ``Retry-After`` instead of piling up.

Without it, load above the upstream connection pool queues inside httpcore, whose pool scans
every connection for every queued request: at 1,000 concurrent streams the event loop spent
its time there, ``/health`` went unanswered and clients that had gone were still sent
upstream. With it, at most ``max_inflight`` generations hold a connection, at most
``max_queue`` wait (FIFO, each for at most ``queue_timeout`` seconds), and a waiter whose
client disconnects leaves the queue (its wait is cancelled).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from app.core.errors import Overloaded


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

    async def acquire(self) -> None:
        """Wait for a generation slot (FIFO); :class:`Overloaded` when the queue is full or
        the wait exceeds ``queue_timeout``. Every successful acquire needs one :meth:`release`."""
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
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout)
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

    def release(self) -> None:
        """Free a slot: hand it to the oldest live waiter, or count it free."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on; inflight stays the same
                return
        self.inflight -= 1
