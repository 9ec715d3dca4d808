"""Signals between the workers of one machine without Redis: the hub (app/engine/signal_hub.py)
on a Unix socket in this process, and two :class:`MachineSignals` standing for two workers
(each its own connection, as each worker has one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.core.errors import GatewayError
from app.engine import signal_hub
from app.engine.machine_signals import MachineSignals
from app.engine.signal_hub import SignalHub
from app.engine.signals import SignalsUnavailable
from tests.support.signals_worker import SignalsWorker

pytestmark = pytest.mark.timeout(30)
Json = dict[str, Any]


def event(seq: int, kind: str = "response.output_text.delta") -> Json:
    return {"type": kind, "sequence_number": seq, "delta": f"t{seq}"}


class Stored:
    """The store's side of a follower (:class:`~app.engine.signals.Settle`): nothing until
    ``events`` is set (the run's end stored)."""

    def __init__(self) -> None:
        self.events: list[Json] | None = None
        self.asked = 0

    async def ended(self, after: int | None) -> list[Json] | None:
        self.asked += 1
        if self.events is None:
            return None
        return [e for e in self.events if e["sequence_number"] > (-1 if after is None else after)]

    def error(self, after: int | None, reason: GatewayError) -> list[Json]:
        return [{"type": "error", "message": reason.message}]


class Worker(SignalsWorker):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.cancels: list[str] = []
        self.cooldowns: list[tuple[str, float]] = []

    def on_cancel(self, run_id: str) -> None:
        self.cancels.append(run_id)

    def on_cooldown(self, url: str, seconds: float) -> None:
        self.cooldowns.append((url, seconds))


@contextlib.asynccontextmanager
async def machine(tmp_path: Path) -> AsyncIterator[tuple[SignalHub, asyncio.Server, Worker, Worker, str]]:
    path = str(tmp_path / "signals.sock")
    server, hub = await signal_hub.listen(path)
    a, b = await Worker(path).start(), await Worker(path).start()
    try:
        yield hub, server, a, b, path
    finally:
        await a.stop()
        await b.stop()
        server.close()


async def until(check: Any, limit: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not check():
        assert loop.time() < deadline
        await asyncio.sleep(0.005)


async def collect(reader: Any) -> list[Json]:
    out: list[Json] = []
    async for batch in reader:
        out += batch
    return out


async def test_a_cancel_reaches_the_owner_at_once(tmp_path: Path) -> None:
    """The owner (the worker that opened the run's copy) hears the cancel; the other worker's
    call returns without error once the hub passed it on; nobody else hears it."""
    async with machine(tmp_path) as (_, _, a, b, _):
        a.signals.mirror("resp_1")
        await asyncio.sleep(0.05)  # the copy is opened before anyone knows the id
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await b.signals.cancel("resp_1")
        await until(lambda: a.cancels == ["resp_1"])
        assert loop.time() - t0 < 0.5
        assert b.cancels == []


async def test_a_cancel_of_a_run_no_worker_opened_goes_to_every_other_worker(tmp_path: Path) -> None:
    """A non-background run has no copy: the hub does not know its owner and passes the cancel
    to every other worker (the owner acts at once), as a Redis publish would."""
    async with machine(tmp_path) as (_, _, a, b, path):
        c = await Worker(path).start()
        try:
            await b.signals.cancel("resp_stream")
            await until(lambda: a.cancels == ["resp_stream"] and c.cancels == ["resp_stream"])
            assert b.cancels == []
        finally:
            await c.stop()


async def test_the_hub_unreachable_is_signals_unavailable(tmp_path: Path) -> None:
    signals = MachineSignals(str(tmp_path / "nothing.sock"), timeout=0.2)
    with pytest.raises(SignalsUnavailable):
        await signals.cancel("resp_1")
    signals.cooldown("http://x", 1.0)  # best effort: never raises
    await asyncio.sleep(0.05)


async def test_a_cooldown_reaches_the_other_workers_only(tmp_path: Path) -> None:
    async with machine(tmp_path) as (_, _, a, b, _):
        a.signals.cooldown("http://x.test:8080", 10.0)
        await until(lambda: b.cooldowns == [("http://x.test:8080", 10.0)])
        await asyncio.sleep(0.05)
        assert a.cooldowns == []


async def test_a_follower_joins_mid_run_resumes_after_and_ends_with_the_copy(tmp_path: Path) -> None:
    """B follows A's run from sequence number 2 while A is at 4: no gap, no duplicate, live
    events as they come, and the end marker ends it (the store is not needed)."""
    async with machine(tmp_path) as (_, _, a, b, _):
        mirror = a.signals.mirror("resp_live")
        for seq in range(5):
            mirror.push(event(seq))
        stored = Stored()
        reader = b.signals.follow("resp_live", 2, stored)
        first = await asyncio.wait_for(reader.__anext__(), 5)
        assert [e["sequence_number"] for e in first] == [3, 4]
        got = asyncio.ensure_future(collect(reader))
        for seq in range(5, 40):
            mirror.push(event(seq))
            if seq % 10 == 0:
                await asyncio.sleep(0.01)
        mirror.push(event(40, "response.completed"))
        mirror.end()
        rest = await asyncio.wait_for(got, 5)
        seqs = [e["sequence_number"] for e in first + rest]
        assert seqs == list(range(3, 41))
        assert [e["type"] for e in rest].count("response.completed") == 1


async def test_the_hub_killed_mid_follow_ends_from_the_store(tmp_path: Path) -> None:
    """The hub's process dies while B follows: B goes on from the store, which ends it with
    the payloads B did not have — exactly one terminal, no duplicate."""
    async with machine(tmp_path) as (hub, server, a, b, _):
        mirror = a.signals.mirror("resp_k")
        for seq in range(3):
            mirror.push(event(seq))
        stored = Stored()
        reader = b.signals.follow("resp_k", None, stored)
        first = await asyncio.wait_for(reader.__anext__(), 5)
        assert [e["sequence_number"] for e in first] == [0, 1, 2]
        rest = asyncio.ensure_future(collect(reader))
        server.close()
        for peer in list(hub.peers):  # what killing the process does to its connections
            assert peer.transport is not None
            peer.transport.abort()
        await asyncio.sleep(0.2)
        assert not rest.done()  # the run has not ended: still following, now the store
        stored.events = [event(seq) for seq in range(6)] + [event(6, "response.completed")]
        tail = await asyncio.wait_for(rest, 5)
        assert [e["sequence_number"] for e in tail] == [3, 4, 5, 6]
        assert tail[-1]["type"] == "response.completed"


async def test_an_owner_gone_mid_run_sends_its_followers_to_the_store(tmp_path: Path) -> None:
    """The owner's connection closes mid-run (killed): its copy is given up, the follower
    gets what the hub had, then the rest from the store."""
    async with machine(tmp_path) as (_, _, a, b, _):
        mirror = a.signals.mirror("resp_o")
        mirror.push(event(0))
        mirror.push(event(1))
        stored = Stored()
        reader = b.signals.follow("resp_o", None, stored)
        assert [e["sequence_number"] for e in await reader.__anext__()] == [0, 1]
        rest = asyncio.ensure_future(collect(reader))
        assert a.signals._link is not None
        a.signals._link.close()
        await asyncio.sleep(0.3)
        assert not rest.done()
        stored.events = [event(0), event(1), event(2, "response.failed")]
        assert [e["sequence_number"] for e in await asyncio.wait_for(rest, 5)] == [2]


async def test_a_copy_is_capped_and_a_reader_behind_it_reads_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's copy keeps at most RUN_BYTES: its oldest payloads are dropped, and a reader that
    needs them is told to read the store (state 2), which gives it everything in order."""
    monkeypatch.setattr(signal_hub, "RUN_BYTES", 2_000)
    async with machine(tmp_path) as (hub, _, a, b, _):
        mirror = a.signals.mirror("resp_big")
        for seq in range(100):
            mirror.push(event(seq))
        await until(lambda: "resp_big" in hub.logs and hub.logs["resp_big"].base + len(
            hub.logs["resp_big"].events) == 100)
        assert hub.logs["resp_big"].base > 0
        assert hub.logs["resp_big"].size <= 2_000
        assert hub.total == hub.logs["resp_big"].size
        stored = Stored()
        stored.events = [event(seq) for seq in range(100)] + [event(100, "response.completed")]
        got = await asyncio.wait_for(collect(b.signals.follow("resp_big", None, stored)), 5)
        assert [e["sequence_number"] for e in got] == list(range(101))


async def test_every_copy_together_is_capped_ended_ones_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over TOTAL_BYTES the hub drops ended copies first; still over, the largest running one
    is given up (its readers read the store)."""
    monkeypatch.setattr(signal_hub, "TOTAL_BYTES", 10_000)
    size = len(orjson.dumps(event(10)))
    async with machine(tmp_path) as (hub, _, a, _, _):
        old = a.signals.mirror("resp_old")
        for seq in range(10, 10 + 7_000 // size):
            old.push(event(seq))
        old.end()
        live = a.signals.mirror("resp_live")
        for seq in range(10, 10 + 4_000 // size):
            live.push(event(seq))
        await until(lambda: "resp_live" in hub.logs and len(hub.logs["resp_live"].events) == 4_000 // size)
        assert hub.logs["resp_old"].gone and not hub.logs["resp_old"].events  # shed first
        assert not hub.logs["resp_live"].gone
        assert hub.total == hub.logs["resp_live"].size <= 10_000
        for seq in range(100, 100 + 7_000 // size):
            live.push(event(seq))
        await until(lambda: hub.logs["resp_live"].gone)
        assert hub.total == 0 == sum(entry.size for entry in hub.logs.values())


async def test_an_ended_copy_is_kept_a_while_then_dropped(tmp_path: Path) -> None:
    async with machine(tmp_path) as (hub, _, a, _, _):
        mirror = a.signals.mirror("resp_end")
        mirror.push(event(0))
        mirror.end()
        await until(lambda: "resp_end" in hub.logs and hub.logs["resp_end"].ended)
        loop = asyncio.get_running_loop()
        hub.sweep(loop.time() + 1)
        assert "resp_end" in hub.logs
        hub.sweep(hub.logs["resp_end"].touched + signal_hub.KEEP_SECONDS + 1)
        assert "resp_end" not in hub.logs and hub.total == 0


async def test_one_answer_is_bounded_so_a_slow_follower_costs_nothing_more(tmp_path: Path) -> None:
    """Reads are pulled: however far behind a follower is, one answer holds at most
    ANSWER_BYTES (or one payload), and nothing is sent that it did not ask for."""
    async with machine(tmp_path) as (_, _, a, b, _):
        mirror = a.signals.mirror("resp_slow")
        big = "x" * 10_000
        for seq in range(200):
            mirror.push({**event(seq), "delta": big})
        await asyncio.sleep(0.1)
        link = await b.signals.link()
        answer = await link.request(["r", 99, "resp_slow", 0, 10], 99, 5)
        assert answer[1] == 0 and 1 <= len(answer[3]) <= signal_hub.ANSWER_BYTES // 10_000
        assert [p["sequence_number"] for p in answer[3]] == list(range(len(answer[3])))


async def test_a_quiet_run_answers_empty_after_the_block(tmp_path: Path) -> None:
    async with machine(tmp_path) as (_, _, _, b, _):
        link = await b.signals.link()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        answer = await link.request(["r", 7, "resp_unknown", 0, 100], 7, 5)
        assert answer == [7, 0, 0, []] and 0.08 < loop.time() - t0 < 1.0


async def test_a_malformed_line_closes_only_that_connection(tmp_path: Path) -> None:
    async with machine(tmp_path) as (_, _, a, b, path):
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b'["nope"]\n')
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
        writer.close()
        a.signals.cooldown("http://y", 2.0)
        await until(lambda: b.cooldowns == [("http://y", 2.0)])
