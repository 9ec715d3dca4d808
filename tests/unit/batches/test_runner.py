"""The batch worker on the SQLite store with a scripted ``dispatch``: lines retried on
transient answers, a worker that dies mid-batch (its lines left ``running``) taken over by
another without a line twice in the output, expiry with the partial results, and leases
renewed while a line runs."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import orjson
import pytest

from app.batches.model import Batch, BatchStore, Result
from app.batches.runner import BatchRunner, RunnerSettings
from app.knowledge.files import FileStore, NewFile
from tests.support.polling import until

ENDPOINT = "/v1/chat/completions"
Pair = tuple[BatchStore, FileStore]


def request(i: int) -> bytes:
    return orjson.dumps({"custom_id": f"c{i}", "method": "POST", "url": ENDPOINT, "body": {
        "model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}})


async def setup(stores: tuple[BatchStore, FileStore], n: int) -> tuple[BatchStore, FileStore, Batch]:
    store, files = stores

    async def body() -> AsyncIterator[bytes]:
        yield b"\n".join(request(i) for i in range(n)) + b"\n"

    f = await files.put("alice", body(), lambda: NewFile("in.jsonl", "batch", "application/jsonl"),
                        max_bytes=1 << 30)
    now = int(time.time())
    batch = Batch("batch_t", "alice", None, ENDPOINT, f.id, now, now + 3600)
    await store.create(batch)
    return store, files, batch


def answer(body: bytes) -> bytes:
    text = orjson.loads(body)["messages"][0]["content"]
    return orjson.dumps({"answer": text, "usage": {"prompt_tokens": 3, "completion_tokens": 2}})


async def reached(store: BatchStore, batch: Batch, *states: str) -> Batch:
    return await until(lambda: store.refresh(batch), lambda b: b.status in states)


async def outputs(store: BatchStore, batch: Batch, ok: bool) -> list[Result]:
    return [r async for r in store.results(batch.id, ok=ok)]


@asynccontextmanager
async def running(runner: BatchRunner) -> AsyncIterator[None]:
    """``runner`` working in a task, cancelled (as a killed worker would stop) on leaving."""
    task = asyncio.create_task(runner.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


FAST = RunnerSettings(slots=3, poll_seconds=0.02, lease_seconds=1.0, backoff_seconds=0.01)


async def test_transient_answers_are_retried_then_succeed(stores: Pair) -> None:
    store, files, batch = await setup(stores, 5)
    calls: Counter[bytes] = Counter()

    async def flaky(digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        calls[body] += 1
        if calls[body] < 3:
            return 503, b'{"error": {"message": "busy"}}'
        return 200, answer(body)

    runner = BatchRunner(store, files, flaky, known_model=lambda m: True, settings=FAST)
    async with running(runner):
        done = await reached(store, batch, "completed")
    assert (done.total, done.completed, done.failed) == (5, 5, 0)
    assert done.usage == {"input": 15, "output": 10, "cached": 0, "reasoning": 0}
    assert set(calls.values()) == {3}
    assert sorted(r.custom_id for r in await outputs(store, batch, True)) == [f"c{i}" for i in range(5)]


async def test_retries_give_up_after_max_attempts_with_the_last_answer(stores: Pair) -> None:
    store, files, batch = await setup(stores, 2)

    async def down(digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        return 502, b'{"error": {"message": "upstream down", "code": "upstream_error"}}'

    runner = BatchRunner(store, files, down, known_model=lambda m: True,
                         settings=RunnerSettings(slots=2, poll_seconds=0.02, backoff_seconds=0.01,
                                                 max_attempts=3))
    async with running(runner):
        done = await reached(store, batch, "completed")
    assert (done.completed, done.failed) == (0, 2)
    failed = await outputs(store, batch, False)
    assert {r.status_code for r in failed} == {502}
    assert failed[0].body["error"]["code"] == "upstream_error"


async def test_a_dead_workers_lines_are_taken_over_and_each_appears_once(stores: Pair) -> None:
    store, files, batch = await setup(stores, 8)
    hang = asyncio.Event()
    ran: Counter[str] = Counter()

    async def first(digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        ran[orjson.loads(body)["messages"][0]["content"]] += 1
        if sum(ran.values()) > 4:
            hanging.append(body)
            await hang.wait()
        return 200, answer(body)

    hanging: list[bytes] = []
    a = BatchRunner(store, files, first, known_model=lambda m: True, settings=FAST)
    # leaving is "kill -9": the worker stops; cancelled, its lines are not released (nor would a dead one's)
    async with running(a):
        await until(lambda: store.refresh(batch), lambda b: b.completed >= 4 and len(hanging) >= 3)
    assert await store.unfinished(batch.id) == 4  # 3 of them left running under a lease
    taken = await store.claim(batch.id, "other", 8, lease=0.5, now=time.time())
    assert [ln.custom_id for ln in taken] == ["c7"]  # the leased ones are not handed out

    async def second(digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        ran[orjson.loads(body)["messages"][0]["content"]] += 1
        return 200, answer(body)

    b = BatchRunner(store, files, second, known_model=lambda m: True, settings=FAST)
    async with running(b):
        done = await reached(store, batch, "completed")
    out = [r.custom_id for r in await outputs(store, batch, True)]
    assert sorted(out) == sorted(f"c{i}" for i in range(8))  # each exactly once
    assert (done.completed, done.failed) == (8, 0)


async def test_leases_are_renewed_while_a_line_runs(stores: Pair) -> None:
    store, files, batch = await setup(stores, 1)
    release = asyncio.Event()

    async def slow(digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        await release.wait()
        return 200, answer(body)

    runner = BatchRunner(store, files, slow, known_model=lambda m: True,
                         settings=RunnerSettings(slots=1, poll_seconds=0.02, lease_seconds=0.3))
    async with running(runner):
        await asyncio.sleep(1.0)  # three leases long: still held
        assert await store.claim(batch.id, "other", 5, lease=1, now=time.time()) == []
        release.set()
        await reached(store, batch, "completed")


async def test_expiry_keeps_what_completed_and_reports_the_rest(stores: Pair) -> None:
    store, files, batch = await setup(stores, 4)
    stuck = asyncio.Event()

    async def half(digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        if b"q0" in body or b"q1" in body:
            return 200, answer(body)
        await stuck.wait()
        raise AssertionError("not reached")

    runner = BatchRunner(store, files, half, known_model=lambda m: True, settings=FAST)
    async with running(runner):
        await until(lambda: store.refresh(batch), lambda b: b.completed >= 2)
        runner.now = lambda: time.time() + 7200  # past the window
        done = await reached(store, batch, "expired")
    assert "expired_at" in done.times and "finalizing_at" in done.times
    assert sorted(r.custom_id for r in await outputs(store, batch, True)) == ["c0", "c1"]
    failed = await outputs(store, batch, False)
    assert sorted(r.custom_id for r in failed) == ["c2", "c3"]
    assert {r.error["code"] for r in failed if r.error} == {"batch_expired"}


@pytest.mark.parametrize("size", [1, 3])
async def test_an_over_long_line_is_refused_and_the_rest_numbered_right(size: int) -> None:
    from app.batches.validate import check

    async def chunks() -> AsyncIterator[bytes]:
        long = b'{"custom_id": "' + b"x" * 5000 + b'"}'
        data = request(0) + b"\n" + long + b"\n" + request(1) + b"\n\n" + b"{"
        for i in range(0, len(data), size * 1000):
            yield data[i:i + size * 1000]

    got = await check(chunks(), ENDPOINT, lambda m: True, max_lines=10, max_line=1000)
    assert [(e["line"], e["code"]) for e in got.errors] == [(2, "line_too_long"), (5, "invalid_json_line")]


async def test_a_runner_cancelled_as_it_is_woken_stops(stores: Pair) -> None:
    """A cancel that meets a wake in the same loop turn: ``asyncio.wait_for`` on 3.11 returned
    the wake and dropped the cancel, the runner polled on forever and the ``gather`` that
    awaited it hung (a CI run stopped on the 300 s timeout, another was stuck past it)."""
    store, files = stores
    runner = BatchRunner(store, files, lambda d, p, b: asyncio.sleep(0),  # type: ignore[arg-type, return-value]
                         known_model=lambda m: True, settings=replace(FAST, poll_seconds=30))
    for _ in range(5):
        task = asyncio.create_task(runner.run())
        await asyncio.sleep(0.1)  # parked in its wait for the next poll
        runner.wake()
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=5)
        assert done, "the runner went on after its cancel"
        assert task.cancelled()
