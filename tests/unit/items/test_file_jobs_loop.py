"""The event loop while a file is read (issue 35 item 3): the gateway waits on its budgeted
worker process in a pool thread, and a budget overrun kills the worker and starts its
replacement there too, never on the loop; the slow file answers within its budget."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.items import file_jobs, file_worker, files
from tests.support import pdf
from tests.unit.items.test_file_bombs import GRACE, _read

LAG_BOUND = 0.25  # seconds: generous for a loaded 2-core machine (the wait itself is 1.5 s)


async def _lag_while(work: asyncio.Future[tuple[str, float]]) -> tuple[tuple[str, float], float]:
    """(the work's result, the longest the loop was late for a 10 ms timer meanwhile)."""
    worst = 0.0
    while not work.done():
        t0 = time.monotonic()
        await asyncio.sleep(0.01)
        worst = max(worst, time.monotonic() - t0 - 0.01)
    return await work, worst


async def test_a_slow_file_leaves_the_loop_free_and_answers_within_its_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """200 fonts x a 65,536-code map let past the count: pypdf works until the budget (1.5 s),
    the worker is killed; the loop answers its timers throughout, and the next file (a fresh
    worker) too."""
    monkeypatch.setattr(file_jobs, "SECONDS", 1.5)
    monkeypatch.setattr(files, "MAX_FONT_ENTRIES", 10**9)
    slow = asyncio.ensure_future(file_jobs.run(lambda: _read(pdf.make_font_bomb(200))))
    (message, took), lag = await _lag_while(slow)
    assert "too long to read (over 1.5 s" in message and took < 1.5 + GRACE
    assert lag < LAG_BOUND, lag
    monkeypatch.setattr(file_jobs, "SECONDS", 10.0)
    after = asyncio.ensure_future(file_jobs.run(lambda: _read(pdf.make_pdf("Next file."))))
    (text, _), lag = await _lag_while(after)
    assert "Next file." in text and lag < LAG_BOUND, lag


async def test_the_kill_and_the_fresh_worker_happen_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where each worker is started and killed: a pool thread's, never the loop's."""
    where: list[tuple[str, int]] = []

    class Recorded(file_worker.Worker):
        def __init__(self) -> None:
            where.append(("start", threading.get_ident()))
            super().__init__()

        def kill(self) -> None:
            where.append(("kill", threading.get_ident()))
            super().kill()

    monkeypatch.setattr(file_jobs, "Worker", Recorded)
    file_jobs._stop_workers()
    monkeypatch.setattr(file_jobs, "SECONDS", 0.8)
    monkeypatch.setattr(files, "MAX_FONT_ENTRIES", 10**9)
    message, _ = await file_jobs.run(lambda: _read(pdf.make_font_bomb(200)))
    assert "too long to read" in message
    monkeypatch.setattr(file_jobs, "SECONDS", 10.0)
    text, _ = await file_jobs.run(lambda: _read(pdf.make_pdf("Again.")))
    assert "Again." in text
    assert [kind for kind, _ in where] == ["start", "kill", "start"]
    assert threading.get_ident() not in {ident for _, ident in where}
    file_jobs._stop_workers()  # no Recorded worker left idle for other tests
