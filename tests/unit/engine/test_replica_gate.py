"""A replica's gate: its bound comes from the slot count it reports (read before the first
request, again after a failure and every RECHECK seconds) or from the config; the rest wait in
the gateway's queue; a lowered bound lets the surplus finish; a resized queue hands the room
to the oldest waiters."""

from __future__ import annotations

import asyncio

import pytest

from adapters.routing import ReplicaPool
from app.core.errors import Overloaded
from app.engine.admission import Admission, ReplicaGate, bound_replicas


class Slots:
    """A replica's ``/props`` as the gate reads it: ``answers`` in turn (the last repeats)."""

    def __init__(self, *answers: int | None, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.reads = 0
        self.delay = delay

    async def __call__(self, url: str) -> int | None:
        self.reads += 1
        await asyncio.sleep(self.delay)
        return self.answers[min(self.reads, len(self.answers)) - 1]


def gate(read: Slots | None, *, fixed: int | None = None, margin: int = 0, recheck: float = 30.0,
         queue_timeout: float = 5.0) -> ReplicaGate:
    return ReplicaGate("http://r1", fixed=fixed, read_slots=read, margin=margin, max_queue=10,
                       queue_timeout=queue_timeout, recheck=recheck)


async def _held(g: ReplicaGate, n: int) -> list[asyncio.Task[None]]:
    """``n`` acquires started at once; after a moment, those that got a slot are done."""
    tasks = [asyncio.create_task(g.acquire()) for _ in range(n)]
    await asyncio.sleep(0.05)
    return tasks


async def test_the_first_burst_waits_for_the_slot_count_and_only_that_many_go() -> None:
    read = Slots(2, delay=0.02)
    g = gate(read)
    tasks = await _held(g, 5)
    assert read.reads == 1  # one read for the whole burst
    assert sum(t.done() for t in tasks) == 2 and g.queue.queued == 3 and g.bound == 2
    g.release()
    await asyncio.sleep(0.01)
    assert sum(t.done() for t in tasks) == 3  # the oldest waiter got the freed slot
    for _ in range(4):
        g.release()
    await asyncio.gather(*tasks)
    assert g.queue.inflight == 0


async def test_margin_adds_to_the_slots() -> None:
    g = gate(Slots(2), margin=1)
    tasks = await _held(g, 5)
    assert sum(t.done() for t in tasks) == 3 and g.bound == 3
    for t in tasks:
        t.cancel()


async def test_a_configured_bound_reads_nothing() -> None:
    read = Slots(8)
    g = gate(read, fixed=1)
    tasks = await _held(g, 3)
    assert read.reads == 0 and sum(t.done() for t in tasks) == 1 and g.bound == 1
    for t in tasks:
        t.cancel()


async def test_no_answer_leaves_the_replica_unbounded_and_a_failure_asks_again() -> None:
    read = Slots(None, 2)
    g = gate(read)
    tasks = await _held(g, 4)
    assert all(t.done() for t in tasks) and g.bound is None and read.reads == 1
    for _ in tasks:
        g.release()
    await g.acquire()  # read recently, no failure: not asked again
    assert read.reads == 1
    g.release(failed=True)  # e.g. it was down: the next request waits for a new read
    await g.acquire()
    assert read.reads == 2 and g.bound == 2 and g.slots == 2


async def test_a_failure_rereads_in_the_background_and_a_smaller_bound_drains_first() -> None:
    read = Slots(3, 1)  # restarted with one slot
    g = gate(read)
    for _ in range(3):
        await g.acquire()
    g.release(failed=True)  # 2 in flight; marks the count stale
    late = asyncio.create_task(g.acquire())  # does not wait for the read: the old bound holds
    await asyncio.sleep(0.02)
    assert read.reads == 2 and g.bound == 1 and g.queue.inflight == 3 and late.done()
    waiting = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.01)
    g.release()
    g.release()
    await asyncio.sleep(0.01)
    assert not waiting.done() and g.queue.inflight == 1  # 3 → 1 before anyone new
    g.release()
    await asyncio.wait_for(waiting, 1)
    assert g.queue.inflight == 1


async def test_the_count_is_read_again_after_recheck_seconds() -> None:
    read = Slots(1, 3)
    g = gate(read, recheck=0.05)
    await g.acquire()
    g.release()
    await asyncio.sleep(0.06)
    await g.acquire()
    await asyncio.sleep(0.01)
    assert read.reads == 2 and g.bound == 3


async def test_a_burst_left_waiting_is_refused_by_the_queue_timeout() -> None:
    g = gate(Slots(1), queue_timeout=0.05)
    await g.acquire()
    with pytest.raises(Overloaded):
        await g.acquire()
    assert g.queue.queued == 0 and g.queue.inflight == 1


async def test_a_client_that_leaves_while_the_count_is_read_does_not_stop_the_read() -> None:
    read = Slots(2, delay=0.05)
    g = gate(read)
    first = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.06)
    assert g.bound == 2 and read.reads == 1 and g.queue.inflight == 0


async def test_resize_hands_new_room_to_the_oldest_waiters() -> None:
    adm = Admission(max_inflight=1, max_queue=5, queue_timeout=5)
    await adm.acquire()
    waiters = [asyncio.create_task(adm.acquire()) for _ in range(3)]
    await asyncio.sleep(0.01)
    adm.resize(3)
    await asyncio.sleep(0.01)
    assert [w.done() for w in waiters] == [True, True, False] and adm.inflight == 3
    adm.resize(1)
    adm.release()
    adm.release()
    assert adm.inflight == 1 and not waiters[2].done()
    adm.release()
    await asyncio.wait_for(waiters[2], 1)
    assert adm.inflight == 1


def test_bound_replicas_shares_one_gate_per_url_and_leaves_unbounded_backends_alone() -> None:
    gates: dict[str, ReplicaGate] = {}
    a = ReplicaPool(["http://r1/", "http://r2"])
    b = ReplicaPool(["http://r2", "http://r3"])
    plain = ReplicaPool(["http://r4"])
    read = Slots(1)
    for pool in (a, b):
        bound_replicas(pool, gates, fixed=None, read_slots=read, margin=0, max_queue=4, queue_timeout=1)
    bound_replicas(plain, gates, fixed=None, read_slots=None, margin=0, max_queue=4, queue_timeout=1)
    assert sorted(gates) == ["http://r1", "http://r2", "http://r3"]
    assert a.replicas[1].gate is b.replicas[0].gate is gates["http://r2"]
    assert a.replicas[0].gate is not a.replicas[1].gate
    assert plain.replicas[0].gate is None


async def test_full_means_every_slot_taken_or_someone_waiting() -> None:
    """What the batch runner asks before it starts a line: a bounded replica with no free slot
    (or a queue) is full; an unbounded one never is."""
    g = gate(None, fixed=2)
    assert not g.full
    held = await _held(g, 1)
    assert not g.full  # one of two slots free
    held += await _held(g, 1)
    assert g.full  # both taken
    waiting = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.01)
    g.release()  # the waiter takes the slot: still full
    await waiting
    assert g.full
    g.release()
    assert not g.full
    assert not gate(None).full  # no bound read yet, none configured: never full
    for task in held:
        task.cancel()


async def test_a_count_never_read_is_read_again_within_a_second_not_thirty(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend still loading (or down) when the first request came: no count, so no bound;
    it was left unbounded until the next 30 s check, and a burst then reached it all at once."""
    monkeypatch.setattr(ReplicaGate, "UNKNOWN_RECHECK", 0.05)
    read = Slots(None, 2)
    g = gate(read)
    await g.acquire()
    g.release()
    assert g.bound is None and read.reads == 1
    await g.acquire()  # within UNKNOWN_RECHECK: no read
    g.release()
    assert read.reads == 1
    await asyncio.sleep(0.06)
    await g.acquire()  # due again, and waited for: the bound holds for this very request
    assert read.reads == 2 and g.bound == 2
    g.release()


async def test_a_failure_seen_elsewhere_has_the_slots_read_again_here() -> None:
    """Another worker found the replica failing (a restart): this worker, whose own requests did
    not fail, reads its slots again on the next request instead of keeping its old bound 30 s."""
    read = Slots(2, 3)
    g = gate(read)
    await g.acquire()
    g.release()
    assert g.bound == 2
    g.failed_elsewhere()
    await g.acquire()  # the re-read runs beside this request
    await asyncio.sleep(0.01)
    g.release()
    assert read.reads == 2 and g.bound == 3
