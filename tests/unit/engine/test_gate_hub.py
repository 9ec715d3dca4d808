"""The machine's replica gates, the service side (:mod:`app.engine.gate_hub`): a replica's slots
granted first come first served up to its bound, a bounded queue (refused beyond it), a released
place or slot passed on, a connection that closes frees all it held, a raised bound grants the
waiters, a restarted service grants nothing during its grace, broken lines close the connection."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from app.engine.gate_hub import GRANTED, QUEUED, REFUSED, GateHub

pytestmark = pytest.mark.timeout(30)
URL = "http://llama:8080"


class Wire(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class Worker:
    """One worker's connection to the hub, its answers read back as (id, kind, busy)."""

    def __init__(self, hub: GateHub) -> None:
        self.peer = hub.protocol()
        self.wire = Wire()
        self.peer.connection_made(self.wire)

    def send(self, *msgs: list[object]) -> None:
        self.peer.data_received(b"".join(orjson.dumps(m) + b"\n" for m in msgs))

    def answers(self) -> list[tuple[int, int, int]]:
        lines = bytes(self.wire.out).splitlines()
        self.wire.out.clear()
        return [tuple(orjson.loads(line)) for line in lines]

    def ask(self, ident: int, bound: int = 2, max_queue: int = 10, url: str = URL,
            read_at: float | None = None) -> None:
        tail = [] if read_at is None else [read_at]
        self.send(["q", ident, url, bound, max_queue, *tail])

    def close(self) -> None:
        self.peer.connection_lost(None)


def held(hub: GateHub, url: str = URL) -> int:
    return len(hub.replicas[url].held)


def test_first_come_first_served_up_to_the_bound() -> None:
    hub = GateHub()
    a, b = Worker(hub), Worker(hub)
    a.ask(1)
    b.ask(1)  # ids are per connection
    assert a.answers() == [(1, GRANTED, 0)] and b.answers() == [(1, GRANTED, 1)]
    b.ask(2)
    a.ask(2)
    b.ask(3)
    assert b.answers() == [(2, QUEUED, 1), (3, QUEUED, 1)] and a.answers() == [(2, QUEUED, 1)]
    a.send(["r", 1])  # A's slot: to the oldest waiter, B's 2
    assert b.answers() == [(2, GRANTED, 1)] and a.answers() == []
    b.send(["r", 1])
    assert a.answers() == [(2, GRANTED, 1)]
    assert held(hub) == 2 and len(hub.replicas[URL].waiting) == 1


def test_the_queue_is_bounded() -> None:
    hub = GateHub()
    a = Worker(hub)
    for ident in (1, 2, 3):
        a.ask(ident, bound=1, max_queue=1)
    assert a.answers() == [(1, GRANTED, 1), (2, QUEUED, 1), (3, REFUSED, 1)]
    a.send(["r", 3])  # refused: nothing held, the release is ignored
    a.send(["r", 1])
    assert a.answers() == [(2, GRANTED, 1)] and held(hub) == 1


def test_a_place_given_up_is_never_granted_and_a_grant_crossing_a_release_is_freed() -> None:
    hub = GateHub()
    a, b = Worker(hub), Worker(hub)
    a.ask(1, bound=1)
    b.ask(1, bound=1)
    b.ask(2, bound=1)
    assert a.answers() == [(1, GRANTED, 1)] and b.answers() == [(1, QUEUED, 1), (2, QUEUED, 1)]
    b.send(["r", 1])  # B's first client left while waiting
    a.send(["r", 1])
    assert b.answers() == [(2, GRANTED, 1)]  # the next one, not the one that left
    a.ask(2, bound=1)
    assert a.answers() == [(2, QUEUED, 1)]
    b.send(["r", 2])  # A's 2 granted; A's client had left meanwhile: its release frees it
    assert a.answers() == [(2, GRANTED, 1)]
    a.send(["r", 2])
    assert held(hub) == 0 and not hub.replicas[URL].waiting


def test_a_connection_closed_frees_its_slots_and_places_at_once() -> None:
    hub = GateHub()
    a, b = Worker(hub), Worker(hub)
    a.ask(1)
    a.ask(2)
    a.ask(3)
    b.ask(1)
    b.ask(2)
    a.answers()
    assert b.answers() == [(1, QUEUED, 1), (2, QUEUED, 1)]
    a.close()  # a worker killed holding two slots, one request waiting
    assert b.answers() == [(1, GRANTED, 1), (2, GRANTED, 1)]
    assert held(hub) == 2 and not hub.replicas[URL].waiting


def test_a_raised_bound_grants_the_waiters_and_replicas_are_apart() -> None:
    hub = GateHub()
    a = Worker(hub)
    a.ask(1, bound=1)
    a.ask(2, bound=1)
    a.ask(3, bound=1, url="http://other")
    assert a.answers() == [(1, GRANTED, 1), (2, QUEUED, 1), (3, GRANTED, 1)]
    a.ask(4, bound=3)  # the replica read 3 slots: the waiter first, then this one
    assert a.answers() == [(2, GRANTED, 0), (4, GRANTED, 1)]


def test_the_most_recently_read_bound_wins_not_the_last_asker() -> None:
    """A backend restarted with more slots: only the worker whose request failed has read the
    new count; the other's older bound must not take the room back (and did: last asker won)."""
    hub = GateHub()
    a, b = Worker(hub), Worker(hub)
    a.ask(1, bound=2, read_at=100.0)
    b.ask(1, bound=2, read_at=100.5)
    a.ask(2, bound=3, read_at=160.0)  # A read 3 slots after a failure
    assert hub.replicas[URL].bound == 3 and a.answers()[-1] == (2, GRANTED, 1)
    b.ask(2, bound=2, read_at=100.5)  # B still has its older reading: queued, not refused
    assert hub.replicas[URL].bound == 3 and b.answers()[-1] == (2, QUEUED, 1)
    b.ask(3, bound=2, read_at=190.0)  # a newer reading of fewer slots does take effect
    assert hub.replicas[URL].bound == 2 and b.answers()[-1] == (3, QUEUED, 1)
    a.ask(3, bound=5)  # no reading time (an older worker): the oldest, ignored
    assert hub.replicas[URL].bound == 2


def test_a_bound_told_without_an_ask_grants_the_waiters_if_it_is_the_newest() -> None:
    hub = GateHub()
    a, b = Worker(hub), Worker(hub)
    for ident in (1, 2, 3):
        a.ask(ident, bound=2, read_at=100.0)
    assert a.answers() == [(1, GRANTED, 0), (2, GRANTED, 1), (3, QUEUED, 1)]
    b.send(["b", URL, 5, 90.0])  # an older reading: ignored
    assert hub.replicas[URL].bound == 2 and a.answers() == []
    b.send(["b", URL, 3, 160.0])  # B read 3 slots: A's waiter is granted now
    assert hub.replicas[URL].bound == 3 and a.answers() == [(3, GRANTED, 1)]
    assert b.answers() == []  # not answered


async def test_a_restarted_service_grants_nothing_during_its_grace_while_slots_come_back() -> None:
    hub = GateHub(grace=0.2)
    a, b = Worker(hub), Worker(hub)
    a.send(["h", 7, URL])  # A still runs a generation it was granted before the restart
    b.ask(1)
    b.ask(2)
    assert b.answers() == [(1, QUEUED, 1), (2, QUEUED, 1)]
    await asyncio.sleep(0.25)
    hub.pump()  # the end of the grace (listen() schedules it)
    assert b.answers() == [(1, GRANTED, 1)]  # bound 2: A's registered slot counts
    a.send(["r", 7])
    assert b.answers() == [(2, GRANTED, 1)]


def test_ping_and_broken_lines() -> None:
    hub = GateHub()
    a = Worker(hub)
    a.send(["p", 5])
    assert a.answers() == [(5, GRANTED, 0)]
    for bad in (b'["q", 1, "u", 0, 1]\n', b"not json\n", b'["z", 1]\n', b'["q", -1, "u", 1, 1]\n',
                b'["q", 1, "u", 1, 1, "later"]\n', b'["q", 1, "u", 1, 1, true]\n',
                b'["b", "u", 0, 1.0]\n', b'["b", "u", 2]\n', b'["b", 1, 2, 1.0]\n', b'["b", "u", 2, NaN]\n',
                b"x" * 70_000):
        peer = Worker(hub)
        peer.peer.data_received(bad)
        assert peer.wire.closed, bad
