"""The machine's counter service (app/http/machine_counters.py) as ``serve --workers N`` runs it:
a real ``python -m app.http.machine_counters`` process on a Unix socket, and two clients in
this process standing for two workers (each its own connection, as each worker has one)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.http.counters import Budget, CountersUnavailable, LocalCounters
from app.http.machine_counters import MachineCounters

pytestmark = pytest.mark.timeout(60)
ONE = Budget(rpm=None, tpm=None, concurrent=1)


class Service:
    def __init__(self, path: Path, lease_seconds: float = 900.0) -> None:
        self.path, self.lease_seconds = path, lease_seconds
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, grace: float = 0.0) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a killed one: its existence then means the new one is bound
        self.process = subprocess.Popen([sys.executable, "-m", "app.http.machine_counters", str(self.path),
                                         str(self.lease_seconds), str(os.getpid()), str(grace)])
        deadline = time.monotonic() + 20
        while not self.path.exists():
            assert self.process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def service_at(tmp_path: Path, lease_seconds: float = 900.0) -> Iterator[Service]:
    service = Service(tmp_path / "counters.sock", lease_seconds)
    service.start()
    try:
        yield service
    finally:
        if service.process is not None and service.process.poll() is None:
            service.process.send_signal(signal.SIGCONT)
            service.kill()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with service_at(tmp_path) as running:
        yield running


async def test_the_same_decisions_as_one_process(service: Service) -> None:
    """rpm, then tpm, then concurrency: the service refuses exactly where LocalCounters does,
    with the same messages, codes and Retry-After (to the clock's precision)."""
    local, shared = LocalCounters(), MachineCounters(str(service.path))
    budget = Budget(rpm=4, tpm=50, concurrent=2)
    trace = [("a", "g", "l1"), ("a", "g", "l2"), ("a", "g", "l3"), ("r", "l1", 60), ("a", "g", "l4"),
             ("a", "n", "x"), ("a", "n", "y"), ("a", "n", "z")]
    for step in trace:
        if step[0] == "r":
            local.release("key:a", step[1], int(step[2]))
            shared.release("key:a", step[1], int(step[2]))
            await asyncio.sleep(0.05)  # a release is not answered: let it land
            continue
        generation = step[1] == "g"
        mine = await local.admit("key:a", budget, generation=generation, lease=str(step[2]))
        theirs = await shared.admit("key:a", budget, generation=generation, lease=str(step[2]))
        assert (mine is None) == (theirs is None), step
        if mine is not None and theirs is not None:
            assert (mine.message, mine.code) == (theirs.message, theirs.code)
            assert abs(mine.retry_after - theirs.retry_after) < 0.5
    refused = await shared.admit("key:a", budget, generation=False, lease="w")
    assert refused is not None and refused.code == "rate_limit_exceeded" and 55 < refused.retry_after <= 60
    await shared.aclose()


async def test_two_workers_never_admit_past_the_limit(service: Service) -> None:
    """40 admissions at once through two connections: exactly the limit gets in."""
    a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
    results = await asyncio.gather(*((a if i % 2 else b).admit(
        "key:c", Budget(None, None, 3), generation=True, lease=f"s{i}") for i in range(40)))
    assert sum(r is None for r in results) == 3
    assert all(r.code == "concurrency_limit_exceeded" for r in results if r is not None)
    results = await asyncio.gather(*((a if i % 2 else b).admit(
        "key:r", Budget(7, None, None), generation=False, lease=f"q{i}") for i in range(30)))
    assert sum(r is None for r in results) == 7
    await a.aclose()
    await b.aclose()


async def test_a_released_slot_is_free_for_the_other_worker(service: Service) -> None:
    a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
    assert await a.admit("key:k", ONE, generation=True, lease="one") is None
    assert await b.admit("key:k", ONE, generation=True, lease="two") is not None
    a.release("key:k", "one", 0)
    assert await _admitted_within(b, "key:k", ONE, 2.0) < 2.0
    await a.aclose()
    await b.aclose()


async def _admitted_within(counters: MachineCounters, who: str, budget: Budget, limit: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if await counters.admit(who, budget, generation=True, lease=f"try{time.monotonic()}") is None:
            return time.monotonic() - t0
        await asyncio.sleep(0.01)
    return limit


async def test_a_worker_gone_gives_its_slots_back_at_once(service: Service) -> None:
    """A worker killed mid-request: its connection closes and its slots are free, without
    waiting for the lease (900 s here)."""
    a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
    assert await a.admit("key:k", ONE, generation=True, lease="held") is None
    assert await b.admit("key:k", ONE, generation=True, lease="x") is not None
    assert a._conn is not None and a._conn.transport is not None
    a._held.clear()  # a dead worker does not come back for it
    a._conn.transport.abort()
    assert await _admitted_within(b, "key:k", ONE, 2.0) < 0.5
    await b.aclose()


async def test_a_slot_never_released_expires_after_the_lease(tmp_path: Path) -> None:
    with service_at(tmp_path, lease_seconds=0.3) as service:
        a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
        assert await a.admit("key:k", ONE, generation=True, lease="stuck") is None  # a stays connected
        assert await b.admit("key:k", ONE, generation=True, lease="x") is not None
        waited = await _admitted_within(b, "key:k", ONE, 3.0)
        assert 0.15 < waited < 1.5, waited
        await a.aclose()
        await b.aclose()


async def test_the_service_gone_is_a_503_at_once_and_back_after_its_restart(service: Service) -> None:
    """Killed: the next counted request is refused with CountersUnavailable (503, Retry-After)
    without waiting; a restarted service answers "unavailable" during its grace while the
    worker holding a slot re-registers it, after which the slot is still taken."""
    a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
    assert await a.admit("key:k", ONE, generation=True, lease="held") is None
    service.kill()
    t0 = time.monotonic()
    with pytest.raises(CountersUnavailable) as refused:
        await b.admit("key:k", ONE, generation=True, lease="x")
    assert time.monotonic() - t0 < 0.5 and refused.value.retry_after == 1.0 and refused.value.status == 503
    assert await b.admit("key:free", Budget(None, None, None), generation=True, lease="y") is None  # no limit
    service.start(grace=0.5)
    with pytest.raises(CountersUnavailable):  # in its grace: not deciding yet
        await b.admit("key:k", ONE, generation=True, lease="x")
    await asyncio.sleep(0.7)
    again = await b.admit("key:k", ONE, generation=True, lease="x")
    assert again is not None and again.code == "concurrency_limit_exceeded"  # a re-registered "held"
    a.release("key:k", "held", 0)
    assert await _admitted_within(b, "key:k", ONE, 2.0) < 1.0
    await a.aclose()
    await b.aclose()


async def test_a_silent_service_is_a_503_after_the_timeout(service: Service) -> None:
    assert service.process is not None
    client = MachineCounters(str(service.path), timeout=0.3)
    assert await client.admit("key:k", ONE, generation=True, lease="one") is None
    service.process.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(CountersUnavailable):
        await client.admit("key:k", ONE, generation=True, lease="two")
    assert 0.25 < time.monotonic() - t0 < 1.0
    service.process.send_signal(signal.SIGCONT)
    await client.aclose()


async def test_no_limit_no_round_trip(tmp_path: Path) -> None:
    """A key without limits (or no auth and no [limits]) never reaches the service: here there is
    none, and it is admitted; a limited one is refused with a 503."""
    client = MachineCounters(str(tmp_path / "nothing.sock"))
    for generation in (True, False):
        assert await client.admit("addr:1.2.3.4", Budget(None, None, None), generation=generation,
                                  lease="l") is None
    assert await client.admit("key:k", Budget(None, 10, 2), generation=False, lease="l") is None  # rpm only
    client.release("addr:1.2.3.4", "l", 10)
    with pytest.raises(CountersUnavailable):
        await client.admit("key:k", Budget(5, None, None), generation=False, lease="l")


async def test_a_cancelled_admission_gives_its_slot_back(service: Service) -> None:
    a = MachineCounters(str(service.path))
    assert await a.admit("key:warm", Budget(1, None, None), generation=False, lease="w") is None  # connected
    task = asyncio.ensure_future(a.admit("key:k", ONE, generation=True, lease="cancelled"))
    await asyncio.sleep(0)
    assert a._conn is not None and len(a._conn.waiting) == 1  # asked, the answer not yet read
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await _admitted_within(a, "key:k", ONE, 2.0) < 1.0
    await a.aclose()


async def test_a_malformed_line_closes_only_that_connection(service: Service) -> None:
    good = MachineCounters(str(service.path))
    assert await good.admit("key:k", Budget(100, None, None), generation=False, lease="x") is None
    for line in (b"not json\n", b'["a", 1]\n', b'["z"]\n', b'["a", 1, 2, 3, 4, 5, 6, 7]\n',
                 b'["a", 1, "w", -1, 0, 0, 0, "l"]\n', b"x" * 70000):
        reader, writer = await asyncio.open_unix_connection(str(service.path))
        writer.write(line)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the service
        writer.close()
    assert await good.admit("key:k", Budget(100, None, None), generation=False, lease="y") is None


def test_local_counters_record_nothing_without_limits_and_forget_idle_keys() -> None:
    local = LocalCounters()
    assert asyncio.run(local.admit("addr:1", Budget(None, None, None), generation=True, lease="l")) is None
    local.release("addr:1", "l", 5)
    assert local.usage == {}
    assert local.decide("key:a", Budget(None, None, 1), True, "s") is None
    local.release("key:a", "s", 0)
    local.sweep(time.monotonic() + 61)
    assert local.usage == {}
    assert local.decide("key:b", Budget(None, None, 1), True, "held") is None
    local.sweep(time.monotonic() + 61)
    assert "key:b" in local.usage  # a held slot keeps its key
