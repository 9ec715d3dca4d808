"""The machine's replica gates: one bound per upstream replica for every worker of one machine
(``serve --workers N`` without Redis).

A bounded replica (llama.cpp's ``/props`` ``total_slots``, or ``[models.X] max_inflight``) is
sent at most its bound of generations at once, however many workers send them.  The slots live
here, inside the machine's counter service process (:mod:`app.http.machine_counters`), on a
socket of its own (``gates.sock`` in the same 0700 directory, path in ``OCMGW_GATES_SOCKET``);
each worker keeps one connection (:class:`app.engine.machine_gate.GateClient`).  One event loop
decides, so two workers never both take a replica's last slot.

The wire: one JSON array a line, in order on each connection (:mod:`app.core.json_lines`).

* ``["q", id, url, bound, max_queue, read_at]`` acquire one of ``url``'s slots (``bound``: the
  asking worker's bound for it; ``read_at``: when that worker read it, ``time.monotonic()``,
  a clock every process of the machine shares).  The replica's bound is the most recently
  read one, whoever tells it: after a backend restart only the worker whose request failed
  reads the new slot count, and the others' older bound must not take it back.  (Without
  ``read_at``, 0: the oldest.)  Answered ``[id, 0, busy]`` when granted
  (at once, or later), ``[id, 1, busy]`` when queued (the grant follows as ``[id, 0, busy]``),
  ``[id, 2, busy]`` when refused: ``max_queue`` requests already wait.  Waiters are granted
  first come, first served.  ``busy`` is 1 when, after the decision, every slot is taken or
  someone waits.
* ``["r", id]`` release: the slot ``id`` holds is freed, or its place in the queue given up
  (a client that left, or a wait that ran out); unknown ids are ignored, so a release that
  crosses a grant on the wire frees the slot just granted.  Not answered.
* ``["b", url, bound, read_at]`` bound: a worker has just read ``url``'s bound (at ``read_at``);
  the newest reading is kept as with an ask, and a raised one grants the waiters now.  A read
  finishes after the burst that started it has asked and queued with the older bound; without
  this, the queued asks waited for the next ask to carry the new bound.  Not answered.
* ``["h", id, url]`` hold: a slot the worker holds is registered again (a restarted service,
  or one taken while the service was away).  Not answered.
* ``["p", id]`` ping, answered ``[id, 0, 0]``: a worker checks the service answers before it
  uses it again.
* A connection that closes frees every slot it held and its places in the queues at once
  (a worker killed mid-generation).
* A restarted service grants nothing for its first ``grace`` seconds (it queues) while the
  workers, reconnecting, register the slots they still hold.

A line over :data:`MAX_LINE` or one that does not parse closes its connection.
"""

from __future__ import annotations

import asyncio
import time

from app.core.json_lines import LinePeer, listen_unix
from app.core.json_lines import count as _int
from app.core.json_lines import text as _text

GATES_ENV = "OCMGW_GATES_SOCKET"
WORKERS_ENV = "OCMGW_WORKER_COUNT"  # serve's worker count: each one's share of a bound without the service
MAX_LINE = 64 * 1024
GRANTED, QUEUED, REFUSED = 0, 1, 2
UNKNOWN_BOUND = 1 << 30  # a replica only held so far (registered again), its bound not yet told


class _Slots:
    """One replica: its bound, the slots taken and the requests waiting (in order)."""

    __slots__ = ("bound", "held", "read_at", "waiting")

    def __init__(self) -> None:
        self.bound = UNKNOWN_BOUND
        self.read_at = float("-inf")  # when the bound in force was read (by its worker)
        self.held: set[tuple[_Peer, int]] = set()
        self.waiting: dict[tuple[_Peer, int], None] = {}  # insertion order: first come first

    @property
    def busy(self) -> int:
        return 1 if self.waiting or len(self.held) >= self.bound else 0


class GateHub:
    """Every replica's slots (see the module docstring)."""

    def __init__(self, grace: float = 0.0) -> None:
        self.replicas: dict[str, _Slots] = {}
        self.grace_until = time.monotonic() + grace if grace > 0 else 0.0

    def protocol(self) -> _Peer:
        return _Peer(self)

    def _slots(self, url: str) -> _Slots:
        slots = self.replicas.get(url)
        if slots is None:
            slots = self.replicas[url] = _Slots()
        return slots

    def _deciding(self) -> bool:
        if self.grace_until and time.monotonic() < self.grace_until:
            return False
        self.grace_until = 0.0
        return True

    def tell(self, url: str, bound: int, read_at: float) -> _Slots:
        """``url``'s bound as read at ``read_at``: kept if it is the newest reading (not the
        last teller's: another worker's older bound must not take the room back)."""
        slots = self._slots(url)
        if read_at >= slots.read_at:
            slots.read_at = read_at
            if bound != slots.bound:
                slots.bound = bound
                self._pump(slots)  # more room: the oldest waiters first
        return slots

    def ask(self, peer: _Peer, ident: int, url: str, bound: int, max_queue: int,
            read_at: float = 0.0) -> int:
        slots = self.tell(url, bound, read_at)
        deciding = self._deciding()
        if deciding and not slots.waiting and len(slots.held) < slots.bound:
            slots.held.add((peer, ident))
            peer.owned[ident] = url
            return GRANTED
        if len(slots.waiting) >= max_queue:
            return REFUSED
        slots.waiting[(peer, ident)] = None
        peer.owned[ident] = url
        return QUEUED

    def hold(self, peer: _Peer, ident: int, url: str) -> None:
        slots = self._slots(url)
        slots.waiting.pop((peer, ident), None)
        slots.held.add((peer, ident))
        peer.owned[ident] = url

    def release(self, peer: _Peer, ident: int) -> None:
        url = peer.owned.pop(ident, None)
        if url is None:
            return
        slots = self.replicas[url]
        slots.held.discard((peer, ident))
        slots.waiting.pop((peer, ident), None)
        self._pump(slots)

    def gone(self, peer: _Peer) -> None:
        """A connection closed: its slots and places are freed, others get them."""
        touched = set()
        for ident, url in peer.owned.items():
            slots = self.replicas[url]
            slots.held.discard((peer, ident))
            slots.waiting.pop((peer, ident), None)
            touched.add(url)
        peer.owned.clear()
        for url in touched:
            self._pump(self.replicas[url])

    def pump(self) -> None:
        """Grant what can be granted on every replica (the end of a restart's grace)."""
        for slots in self.replicas.values():
            self._pump(slots)

    def _pump(self, slots: _Slots) -> None:
        if not slots.waiting or not self._deciding():
            return
        while slots.waiting and len(slots.held) < slots.bound:
            key = next(iter(slots.waiting))
            del slots.waiting[key]
            slots.held.add(key)
            peer, ident = key
            peer.answer(ident, GRANTED, slots.busy)


class _Peer(LinePeer):
    """One worker's connection (lines over :data:`MAX_LINE` or malformed: closed)."""

    max_line = MAX_LINE
    name = "gates"

    def __init__(self, hub: GateHub) -> None:
        super().__init__()
        self.hub = hub
        self.owned: dict[int, str] = {}  # id -> url: slots held and places in queues

    def answer(self, ident: int, kind: int, busy: int) -> None:
        self.send(b"[%d,%d,%d]\n" % (ident, kind, busy))

    def handle(self, msg: list[object]) -> None:
        op, hub = msg[0], self.hub
        if op == "b":
            bound = _int(msg[2])
            if bound < 1:
                raise ValueError(bound)
            hub.tell(_text(msg[1]), bound, _time(msg[3]))
            return
        ident = _int(msg[1])
        if op == "q":
            url, bound, max_queue = _text(msg[2]), _int(msg[3]), _int(msg[4])
            read_at = _time(msg[5]) if len(msg) > 5 else 0.0
            if bound < 1:
                raise ValueError(bound)
            kind = hub.ask(self, ident, url, bound, max_queue, read_at)
            self.answer(ident, kind, hub.replicas[url].busy)
        elif op == "r":
            hub.release(self, ident)
        elif op == "h":
            hub.hold(self, ident, _text(msg[2]))
        elif op == "p":
            self.answer(ident, GRANTED, 0)
        else:
            raise ValueError(op)

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub.gone(self)


def _time(value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise TypeError(value)  # NaN would never compare
    return float(value)


async def listen(path: str, grace: float = 0.0) -> tuple[asyncio.Server, GateHub]:
    """The machine's gates listening on ``path`` (mode 0600); a restarted service's ``grace``."""
    hub = GateHub(grace)
    server = await listen_unix(path, hub.protocol)
    if grace > 0:
        asyncio.get_running_loop().call_later(grace + 0.01, hub.pump)
    return server, hub
