"""The signal hub's "every other worker, and wait" asks (app/engine/machine_asks.py): the hub on a
Unix socket in this process, :class:`MachineSignals` standing for the workers (each its own
connection), and a raw socket for a worker that never answers or a broken one."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.engine import signal_hub
from app.engine.machine_signals import MachineSignals
from app.engine.signal_hub import SignalHub
from tests.support.signals_worker import SignalsWorker

pytestmark = pytest.mark.timeout(30)


class Worker(SignalsWorker):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.heard: list[list[Any]] = []
        self.linked = 0
        self.signals.asks.handlers["note"] = self.heard.append
        self.signals.asks.on_link.append(self._linked)

    def _linked(self) -> None:
        self.linked += 1

    def ready(self) -> bool:
        return self.linked > 0


@contextlib.asynccontextmanager
async def machine(tmp_path: Path, workers: int = 3) -> AsyncIterator[tuple[SignalHub, list[Worker], str]]:
    path = str(tmp_path / "signals.sock")
    server, hub = await signal_hub.listen(path)
    started = [await Worker(path).start() for _ in range(workers)]
    try:
        yield hub, started, path
    finally:
        for worker in started:
            await worker.stop()
        server.close()


async def test_every_other_worker_runs_the_handler_before_the_ask_returns(tmp_path: Path) -> None:
    async with machine(tmp_path) as (hub, (a, b, c), _):
        assert await a.signals.everywhere(["note", "k1", 2]) == (2, 2)
        assert b.heard == [["k1", 2]] and c.heard == [["k1", 2]]  # already: no waiting here
        assert a.heard == []  # not the asker
        assert hub.asks.pending == {}


async def test_an_async_handler_is_waited_for(tmp_path: Path) -> None:
    async with machine(tmp_path, workers=2) as (_, (a, b), _):
        release = asyncio.Event()
        done: list[str] = []

        async def slow(args: list[Any]) -> None:
            await release.wait()
            done.append("flushed")

        b.signals.asks.handlers["usage"] = slow
        ask = asyncio.ensure_future(a.signals.everywhere(["usage"], within=5.0))
        await asyncio.sleep(0.2)
        assert not ask.done()  # b has not finished
        release.set()
        assert await ask == (1, 1) and done == ["flushed"]


async def test_a_handler_that_fails_or_is_missing_still_answers(tmp_path: Path) -> None:
    async with machine(tmp_path, workers=2) as (_, (a, b), _):
        def broken(args: list[Any]) -> None:
            raise RuntimeError("store down")

        b.signals.asks.handlers["broken"] = broken
        assert await a.signals.everywhere(["broken"]) == (1, 1)
        assert await a.signals.everywhere(["nobody-has-this"]) == (1, 1)


async def test_a_worker_that_does_not_answer_is_waited_for_until_the_deadline(tmp_path: Path) -> None:
    async with machine(tmp_path, workers=2) as (hub, (a, b), path):
        with socket.socket(socket.AF_UNIX) as mute:
            mute.connect(path)
            await asyncio.sleep(0.05)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            assert await a.signals.everywhere(["note", 1], within=0.3) == (1, 2)
            assert 0.25 < loop.time() - t0 < 2.0
            assert b.heard == [[1]] and hub.asks.pending == {}


async def test_a_worker_gone_mid_ask_is_not_waited_for(tmp_path: Path) -> None:
    async with machine(tmp_path, workers=2) as (hub, (a, _), path):
        mute = socket.socket(socket.AF_UNIX)
        mute.connect(path)
        await asyncio.sleep(0.05)
        ask = asyncio.ensure_future(a.signals.everywhere(["note"], within=5.0))
        await asyncio.sleep(0.1)
        assert not ask.done()
        mute.close()
        assert await asyncio.wait_for(ask, 2.0) == (1, 1)  # the one still there answered
        assert hub.asks.pending == {}


async def test_alone_the_ask_returns_at_once(tmp_path: Path) -> None:
    async with machine(tmp_path, workers=1) as (_, (a,), _):
        assert await a.signals.everywhere(["note"]) == (0, 0)


async def test_the_hub_unreachable_raises_for_the_caller_to_handle(tmp_path: Path) -> None:
    signals = MachineSignals(str(tmp_path / "nothing.sock"), timeout=0.2)
    with pytest.raises(OSError):
        await signals.everywhere(["note"])


async def test_a_malformed_ask_closes_only_that_connection(tmp_path: Path) -> None:
    async with machine(tmp_path, workers=2) as (hub, (a, b), path):
        for bad in (["f", 1, 100, "not-a-list"], ["f", 1, 100, []], ["f", 1, 100, [5]], ["f", -1, 100, ["x"]],
                    ["F", "tag"]):
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(orjson.dumps(bad) + b"\n")
            assert await asyncio.wait_for(reader.read(100), 2.0) == b"", bad  # closed by the hub
            writer.close()
        assert await a.signals.everywhere(["note", "still"]) == (1, 1)
        assert b.heard == [["still"]] and hub.asks.pending == {}


async def test_a_worker_reconnecting_runs_its_link_hooks(tmp_path: Path) -> None:
    """The hub restarted: what was asked meanwhile was not heard, so each worker's hooks run on
    the new connection (the key cache forgets everything: app/http/keys.py)."""
    path = str(tmp_path / "signals.sock")
    server, _ = await signal_hub.listen(path)
    worker = await Worker(path).start()
    try:
        assert worker.linked == 1
        assert worker.signals._link is not None
        server.close()
        worker.signals._link.close()  # the hub's end went away
        server, _ = await signal_hub.listen(path)
        for _ in range(300):
            if worker.linked == 2:
                break
            await asyncio.sleep(0.01)
        assert worker.linked == 2
    finally:
        await worker.stop()
        server.close()
