"""Full garbage collections held off while a big request is read and planned.

CPython's generational collector (3.11-3.13) starts a full (generation 2) collection whenever
the objects that survived into the old generation since the last one exceed a quarter of those
it kept then.  After start-up's
``gc.freeze()`` (app/main.py) that old generation is small, so a request that builds a million
objects (100,000 input items: dicts, models, messages) triggers a geometric series of full
collections, ~12 of 25-435 ms each, every one scanning the request's own live objects and
collecting nothing, all holding the GIL: the event loop stalls however much of the work runs
in threads.

:class:`CollectionHold` is a process-wide, counted hold on those full collections: while any
big request holds it the old generation's threshold is out of reach, and young collections
(generations 0 and 1, cost bounded by ~7,000 objects) go on, so short-lived cycles of every
other request are still freed.  The last release restores the thresholds.  A hold lasts at
most ``cap`` seconds however many big requests overlap: at the first young collection past it
the thresholds are restored, and no new hold starts until every holder has released.  A
stream of big requests therefore cannot keep the old generation uncollected for longer.

:data:`HOLD` is the one the gateway uses (app/http/body.py: bodies over 1 MB, from reading the
body to the route's answer).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

OUT_OF_REACH = 2**31 - 1  # the largest threshold gc accepts: a full collection never comes due
CAP_SECONDS = 10.0


class CollectionHold:
    """A counted hold on automatic full collections, lifted at ``cap`` seconds at the latest."""

    def __init__(self, cap: float = CAP_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.cap = cap
        self._clock = clock
        self._lock = threading.RLock()  # a collection (its callback) may start inside acquire
        self._holders = 0
        self._since = 0.0
        self._saved: tuple[int, int, int] | None = None  # the thresholds while held, else None

    @property
    def holders(self) -> int:
        return self._holders

    @property
    def active(self) -> bool:
        """Whether full collections are held off right now."""
        return self._saved is not None

    def acquire(self) -> Release:
        """Hold full collections (a no-op past the cap, until every holder has released); call
        the returned :class:`Release` once when the big work is done."""
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._since = self._clock()
                self._saved = gc.get_threshold()
                gc.set_threshold(self._saved[0], self._saved[1], OUT_OF_REACH)
                gc.callbacks.append(self._on_collection)
            elif self._saved is not None and self._clock() - self._since > self.cap:
                self._lift()
        return Release(self)

    def _release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._saved is not None:
                self._lift()

    def _lift(self) -> None:
        assert self._saved is not None
        gc.set_threshold(*self._saved)
        self._saved = None
        gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """Every young collection while held checks the cap: garbage accumulates only as objects
        are allocated, and allocation is what starts young collections."""
        if phase == "stop" and self._saved is not None and self._clock() - self._since > self.cap:
            with self._lock:
                if self._saved is not None:
                    self._lift()


class Release:
    """A holder's one release (a second call does nothing)."""

    def __init__(self, hold: CollectionHold) -> None:
        self._hold: CollectionHold | None = hold

    def __call__(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold._release()


HOLD = CollectionHold()
