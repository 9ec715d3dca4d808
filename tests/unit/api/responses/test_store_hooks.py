"""A stored response's two writes (app/api/responses/hooks.py ``StoreHooks``): a non-stream
foreground run's start is written alongside its generation (``started`` does not wait for
it) once the run has lasted ``START_AFTER`` (one that ends sooner is written once, at its
end), its end only after its start; a streamed or background run's start is written before
``started`` returns; end to end, a running non-stream response is in the store before its end
(a crash then leaves it to read ``failed``), and its answer comes once its end is stored."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.api.responses import hooks as hooks_module
from app.api.responses.hooks import StoreHooks
from app.stores.sqlite_responses import SqliteResponseStore
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config, gateway
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.unit.api.responses.test_routes import REASONING

Json = dict[str, Any]


class GatedStore:
    """Records each put's status; a put waits for ``gate`` (or fails when ``fail`` is set)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered: list[str] = []
        self.puts: list[str] = []
        self.fail_first = False

    async def put(self, resource: Json, input_items: list[Json], owner: str) -> None:
        self.entered.append(resource["status"])
        await self.gate.wait()
        if self.fail_first and not self.puts:
            self.puts.append("failed write")
            raise OSError("disk gone")
        self.puts.append(resource["status"])

    async def put_events(self, response_id: str, owner: str, events: list[Json]) -> None:
        raise AssertionError("not a background run")


def _run(mode: str, state: dict[str, str]) -> Any:
    return SimpleNamespace(id="resp_1", mode=mode, replay=None, held=[], state=state)


@pytest.fixture
def folded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks_module, "snapshot",
                        lambda run: {"id": run.id, "status": run.state["status"]})


@pytest.fixture
def due_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait run's start is due as soon as the run has started."""
    monkeypatch.setattr(hooks_module, "START_AFTER", 0.0)


async def test_a_wait_run_that_ends_before_its_start_is_due_is_written_once(folded: None) -> None:
    store = GatedStore()
    store.gate.set()
    hooks = StoreHooks(store, [], "alice")  # type: ignore[arg-type]
    run = _run("wait", {"status": "in_progress"})
    await hooks.started(run)
    await asyncio.sleep(hooks_module.START_AFTER / 4)
    run.state["status"] = "completed"
    await asyncio.wait_for(hooks.ended(run), 1)
    await asyncio.sleep(hooks_module.START_AFTER * 1.5)  # the start, cancelled, never comes
    assert store.puts == ["completed"]


async def test_a_wait_run_that_lasts_gets_its_start_written_while_it_runs(folded: None) -> None:
    store = GatedStore()
    store.gate.set()
    hooks = StoreHooks(store, [], "alice")  # type: ignore[arg-type]
    run = _run("wait", {"status": "in_progress"})
    await hooks.started(run)
    await asyncio.sleep(hooks_module.START_AFTER * 1.5)
    assert store.puts == ["in_progress"]  # written before the run ended
    run.state["status"] = "completed"
    await hooks.ended(run)
    assert store.puts == ["in_progress", "completed"]


async def test_a_wait_runs_start_is_written_alongside_and_its_end_after_it(
        folded: None, due_at_once: None) -> None:
    store = GatedStore()
    hooks = StoreHooks(store, [], "alice")  # type: ignore[arg-type]
    run = _run("wait", {"status": "in_progress"})
    await asyncio.wait_for(hooks.started(run), 1)  # returns with the write still waiting
    await asyncio.sleep(0.01)
    assert store.entered == ["in_progress"] and store.puts == []
    run.state["status"] = "completed"  # the snapshot was taken at the start
    ending = asyncio.ensure_future(hooks.ended(run))
    await asyncio.sleep(0.05)
    assert not ending.done() and store.entered == ["in_progress"]  # the end waits for the start
    store.gate.set()
    await asyncio.wait_for(ending, 1)
    assert store.puts == ["in_progress", "completed"]


@pytest.mark.parametrize("mode", ["stream", "background"])
async def test_a_streamed_or_background_runs_start_is_written_before_started_returns(
        mode: str, folded: None) -> None:
    store = GatedStore()
    hooks = StoreHooks(store, [], "alice")  # type: ignore[arg-type]
    starting = asyncio.ensure_future(hooks.started(_run(mode, {"status": "in_progress"})))
    await asyncio.sleep(0.05)
    assert not starting.done()
    store.gate.set()
    await asyncio.wait_for(starting, 1)
    assert store.puts == ["in_progress"]


async def test_a_wait_runs_failed_start_is_logged_and_its_end_still_written(
        caplog: pytest.LogCaptureFixture, folded: None, due_at_once: None) -> None:
    store = GatedStore()
    store.fail_first = True
    store.gate.set()
    hooks = StoreHooks(store, [], "alice")  # type: ignore[arg-type]
    run = _run("wait", {"status": "in_progress"})
    await hooks.started(run)
    await asyncio.sleep(0.01)
    run.state["status"] = "completed"
    with caplog.at_level(logging.WARNING, logger=hooks_module.__name__):
        await hooks.ended(run)
    assert store.puts == ["failed write", "completed"]
    assert "could not store that it started" in caplog.text
    await hooks.ended(run)  # a retried end writes the end again, and only it
    assert store.puts == ["failed write", "completed", "completed"]


async def test_a_running_non_stream_response_is_stored_before_its_end(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    upstream = EndlessUpstream()
    async with gateway(endless_transport(upstream), config(store_path=str(db))) as c:
        post = asyncio.ensure_future(c.post("/v1/responses", json={"model": MODEL, "input": "hi"}))
        await asyncio.wait_for(upstream.five_sent.wait(), 10)
        replica = await SqliteResponseStore.open(db)  # what another process sees
        try:
            found: list[Json] = []
            for _ in range(100):
                page = await replica.page("", limit=5, after=None, ascending=False)
                assert page is not None
                if page:
                    found = page
                    break
                await asyncio.sleep(0.02)
            assert [r["status"] for r in found] == ["in_progress"]
        finally:
            await replica.close()
        post.cancel()
        with pytest.raises(asyncio.CancelledError):
            await post


async def test_a_non_stream_answer_is_stored_when_it_is_heard(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    async with gateway(FakeLlamaCpp(REASONING).transport(), config(store_path=str(db))) as c:
        for _ in range(3):
            answer = await c.post("/v1/responses", json={"model": MODEL, "input": "hi"})
            assert answer.status_code == 200, answer.text
            rid = answer.json()["id"]
            replica = await SqliteResponseStore.open(db)  # another process: no in-flight copy
            try:
                stored = await replica.get(rid, "")
                assert stored is not None and stored.resource["status"] == "completed"
                assert stored.resource["output"] == answer.json()["output"]
            finally:
                await replica.close()


async def test_an_end_cancelled_while_the_start_is_written_leaves_the_start_whole(
        folded: None, due_at_once: None) -> None:
    store = GatedStore()
    hooks = StoreHooks(store, [], "alice")  # type: ignore[arg-type]
    run = _run("wait", {"status": "in_progress"})
    await hooks.started(run)
    await asyncio.sleep(0.01)
    ending = asyncio.ensure_future(hooks.ended(run))
    await asyncio.sleep(0.02)
    ending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ending
    run.state["status"] = "completed"
    again = asyncio.ensure_future(hooks.ended(run))  # a retried end still waits for the start
    await asyncio.sleep(0.02)
    assert not again.done() and store.entered == ["in_progress"]  # the end not begun
    store.gate.set()
    await asyncio.wait_for(again, 1)
    assert store.puts == ["in_progress", "completed"]
