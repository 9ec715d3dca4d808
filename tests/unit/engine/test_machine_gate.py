"""A replica's gate for the whole machine, the workers' side (:mod:`app.engine.machine_gate`),
against the real gate service on a Unix socket, two :class:`GateClient` standing for two
workers: one bound for both, a client that leaves or times out gives its place up, a worker gone
frees its slots at once, an unbounded replica never asks; the service gone or hung → each worker
keeps to ceil(bound / workers) (counting what it holds), served, never a hang; the service back
→ the slots held are registered again and the waiters return to the machine's queue."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator

import pytest

from app.core.errors import Overloaded
from app.engine.gate_hub import GateHub, _Peer
from app.engine.machine_gate import GateClient, MachineGate

pytestmark = pytest.mark.timeout(60)
URL = "http://llama:8080"


class Service:
    """The gate service on ``path``; ``stop`` kills it (its connections closed), ``hang`` makes it
    accept connections and never answer."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.hub = GateHub()
        self.peers: list[_Peer] = []
        self.server: asyncio.Server | None = None

    async def start(self, grace: float = 0.0, hung: bool = False) -> None:
        self.hub = GateHub(grace)
        self.peers = []

        def peer() -> asyncio.Protocol:
            if hung:
                return asyncio.Protocol()
            made = self.hub.protocol()
            self.peers.append(made)
            return made

        self.server = await asyncio.get_running_loop().create_unix_server(peer, self.path)
        if grace:
            asyncio.get_running_loop().call_later(grace + 0.01, self.hub.pump)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for p in self.peers:
            if p.transport is not None:
                p.transport.abort()
        await asyncio.sleep(0.02)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def held(self) -> int:
        slots = self.hub.replicas.get(URL)
        return 0 if slots is None else len(slots.held)


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    directory = tempfile.mkdtemp(prefix="gates-", dir="/tmp")
    svc = Service(f"{directory}/gates.sock")
    await svc.start()
    try:
        yield svc
    finally:
        with contextlib.suppress(AssertionError):
            await svc.stop()
        shutil.rmtree(directory, ignore_errors=True)


def gate(client: GateClient, fixed: int | None = 2, queue_timeout: float = 5.0, max_queue: int = 10,
         read: object = None) -> MachineGate:
    return MachineGate(URL, client=client, fixed=fixed, read_slots=read,  # type: ignore[arg-type]
                       margin=0, max_queue=max_queue, queue_timeout=queue_timeout)


async def settle(tasks: list[asyncio.Task[None]]) -> int:
    await asyncio.sleep(0.05)
    return sum(t.done() and not t.cancelled() and t.exception() is None for t in tasks)


async def test_one_bound_for_two_workers_first_come_first_served(service: Service) -> None:
    a, b = GateClient(service.path, 2), GateClient(service.path, 2)
    gates = {"a": gate(a), "b": gate(b)}
    order: list[str] = []

    async def one(name: str) -> None:
        await gates[name[0]].acquire()
        order.append(name)

    tasks = []
    for i in range(3):
        for name in "ab":
            tasks.append(asyncio.create_task(one(f"{name}{i}")))
            await asyncio.sleep(0.01)  # asked in this order
    assert await settle(tasks) == 2 and service.held() == 2  # was 2 per worker: 4
    assert gates["a"].full and gates["b"].full  # the service says busy: batch lines wait
    for done in range(4):
        gates[order[done][0]].release()  # the oldest generation ends
        await asyncio.sleep(0.03)
        assert service.held() == 2 and len(order) == done + 3
    await asyncio.gather(*tasks)
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]  # in the order they asked
    for name in order[4:]:
        gates[name[0]].release()
    await asyncio.sleep(0.02)
    assert service.held() == 0 and gates["a"].queue.inflight == 0 and gates["b"].queue.inflight == 0
    await a.aclose()
    await b.aclose()


async def test_a_client_that_leaves_or_times_out_gives_its_place_up(service: Service) -> None:
    a, b = GateClient(service.path, 2), GateClient(service.path, 2)
    ga, gb = gate(a, fixed=1, queue_timeout=0.3), gate(b, fixed=1, queue_timeout=0.3)
    await ga.acquire()
    leaving = asyncio.create_task(gb.acquire())
    await asyncio.sleep(0.05)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    with pytest.raises(Overloaded):  # no slot within the queue timeout: 503
        await gb.acquire()
    await asyncio.sleep(0.02)
    assert not service.hub.replicas[URL].waiting  # both places given up
    ga.release()
    await asyncio.wait_for(gb.acquire(), 1.0)  # nothing leaked: the one slot is free
    assert service.held() == 1 and gb.queue.inflight == 1
    gb.release()
    await asyncio.sleep(0.02)
    assert service.held() == 0


async def test_the_queue_bound_refuses(service: Service) -> None:
    a = GateClient(service.path, 2)
    g = gate(a, fixed=1, max_queue=1)
    await g.acquire()
    waiting = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.05)
    with pytest.raises(Overloaded) as refused:
        await g.acquire()
    assert refused.value.status == 503 and refused.value.retry_after >= 1
    g.release()
    await waiting
    g.release()


async def test_a_worker_gone_frees_its_slots_at_once(service: Service) -> None:
    a, b = GateClient(service.path, 2), GateClient(service.path, 2)
    ga, gb = gate(a), gate(b)
    await ga.acquire()
    await ga.acquire()
    waiting = asyncio.create_task(gb.acquire())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await a.aclose()  # its connection closes, as when the worker is killed
    await asyncio.wait_for(waiting, 0.5)
    gb.release()


async def test_an_unbounded_replica_never_asks(service: Service) -> None:
    async def no_slots(url: str) -> int | None:
        return None

    a = GateClient(service.path, 2)
    g = gate(a, fixed=None, read=no_slots)
    for _ in range(5):
        await g.acquire()
    assert g.bound is None and a._conn is None and not service.peers
    for _ in range(5):
        g.release()
    assert g.queue.inflight == 0


async def test_the_service_gone_each_worker_keeps_its_share_then_comes_back(service: Service) -> None:
    a, b = GateClient(service.path, 2), GateClient(service.path, 2)
    ga, gb = gate(a, fixed=3), gate(b, fixed=3)
    await ga.acquire()  # held through the outage
    await service.stop()
    # ceil(3 / 2) = 2 each, counting what the worker holds: A one more, B two
    tasks_a = [asyncio.create_task(ga.acquire()) for _ in range(3)]
    tasks_b = [asyncio.create_task(gb.acquire()) for _ in range(3)]
    assert await settle(tasks_a) == 1 and await settle(tasks_b) == 2
    assert not a.up and not b.up
    ga.release()  # A's share passes on locally
    assert await settle(tasks_a) == 2
    await service.start(grace=0.1)  # restarted: the slots held come back first
    await asyncio.sleep(0.4)
    assert a.up and b.up
    assert service.held() == 4  # A 2 + B 2, registered again; bound 3: the waiters wait
    assert await settle(tasks_a) == 2 and await settle(tasks_b) == 2
    assert len(service.hub.replicas[URL].waiting) == 2  # moved back to the machine's queue
    gb.release()
    gb.release()  # 2 in flight now: one waiter granted
    assert await settle(tasks_a) + await settle(tasks_b) == 5 and service.held() == 3
    ga.release()
    ga.release()  # A's two from the outage: the last waiter granted
    await asyncio.wait_for(asyncio.gather(*tasks_a, *tasks_b), 1.0)
    assert service.held() == 2  # the third of each
    ga.release()
    gb.release()
    await asyncio.sleep(0.02)
    assert service.held() == 0
    assert ga.queue.inflight == 0 and gb.queue.inflight == 0
    await a.aclose()
    await b.aclose()


async def test_a_hung_service_costs_one_ack_timeout_then_the_share(service: Service) -> None:
    await service.stop()
    await service.start(hung=True)  # accepts, never answers
    a = GateClient(service.path, 2, ack_timeout=0.2)
    g = gate(a, fixed=2)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.wait_for(g.acquire(), 2.0)
    assert 0.15 < loop.time() - t0 < 1.0 and not a.up
    t0 = loop.time()
    second = asyncio.create_task(g.acquire())  # ceil(2 / 2) = 1: waits for the first, locally
    await asyncio.sleep(0.05)
    assert not second.done()
    g.release()
    await asyncio.wait_for(second, 0.5)
    assert loop.time() - t0 < 0.5  # no round trip to a hung service
    g.release()
    await a.aclose()


async def test_a_bound_read_again_after_a_failure_is_kept_over_the_other_workers_older_one(
        service: Service) -> None:
    """The backend restarted with 3 slots: only worker A's request failed, so only A reads the
    new count; B, still on its 2 of a minute ago, asks next and must not take the room back."""
    slots = {"n": 2}

    async def read(url: str) -> int | None:
        return slots["n"]

    a, b = GateClient(service.path, 2), GateClient(service.path, 2)
    ga, gb = gate(a, fixed=None, read=read), gate(b, fixed=None, read=read)
    await ga.acquire()
    await gb.acquire()
    assert service.hub.replicas[URL].bound == 2 and ga.read_at <= gb.read_at
    ga.release(failed=True)  # A's generation failed: its slot count is read again
    gb.release()
    slots["n"] = 3
    await ga.acquire()
    await asyncio.sleep(0.05)  # the re-read runs beside the first acquire
    ga.release()
    await ga.acquire()
    assert ga.bound == 3 and gb.bound == 2 and ga.read_at > gb.read_at
    await gb.acquire()
    held = [asyncio.create_task(gb.acquire()) for _ in range(2)]  # B asks with its older 2
    assert await settle(held) == 1 and service.hub.replicas[URL].bound == 3  # 3 at once, not 2
    for t in held:
        t.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    await a.aclose()
    await b.aclose()


async def test_a_count_read_during_a_burst_grants_the_asks_queued_under_the_older_one(
        service: Service) -> None:
    """The backend came back with 3 slots; a burst reaches worker B while B reads the count
    again (a failure heard from A): its asks go out with the older 2 and queue.  The count read
    is told to the service at once, which grants the third now (it waited for a next ask)."""
    slots, reading = {"n": 2}, asyncio.Event()
    reading.set()

    async def read(url: str) -> int | None:
        await reading.wait()
        return slots["n"]

    b = GateClient(service.path, 2)
    gb = gate(b, fixed=None, read=read)
    await gb.acquire()
    gb.release()
    assert service.hub.replicas[URL].bound == 2
    reading.clear()
    slots["n"] = 3
    gb.failed_elsewhere()
    burst = [asyncio.create_task(gb.acquire()) for _ in range(4)]
    assert await settle(burst) == 2  # asked under 2 while the read runs
    reading.set()
    assert await settle(burst) == 3 and service.hub.replicas[URL].bound == 3
    for t in burst:
        t.cancel()
    await asyncio.gather(*burst, return_exceptions=True)
    await b.aclose()
