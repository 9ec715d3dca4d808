"""Two batch workers on one store (two connections to one SQLite file, as two worker processes
have; two pools on one PostgreSQL database, as two replicas have): a ``validating`` batch is
validated by the one that claims it, a runner acting on a stale view of a batch that has moved
on rewrites none of its lines, a runner killed mid-validation is replaced once its lease has
run out (never while it is alive), and every line is run exactly once across the two."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiosqlite
import orjson
import pytest

from app.batches.model import Batch, BatchStore
from app.batches.postgres_batches import PostgresBatchStore
from app.batches.runner import BatchRunner, RunnerSettings
from app.batches.sqlite_batches import SqliteBatchStore
from app.knowledge.files import FileStore, StoredFile
from app.knowledge.local_files import LocalFileStore
from app.knowledge.postgres_files import PostgresFileStore
from app.stores.sqlite_db import configure
from tests.support.polling import until
from tests.unit.batches.test_runner import answer, outputs, running, setup

Two = tuple[tuple[BatchStore, FileStore], tuple[BatchStore, FileStore]]
FAST = RunnerSettings(slots=3, poll_seconds=0.02, lease_seconds=1.0, backoff_seconds=0.01)


@pytest.fixture(params=["sqlite", "postgres"])
async def two(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Two]:
    """Two workers' own handles on one store."""
    if request.param == "sqlite":
        dbs = [await aiosqlite.connect(tmp_path / "store.sqlite") for _ in range(2)]
        for db in dbs:
            await configure(db)
        yield ((await SqliteBatchStore.open(dbs[0]), await LocalFileStore.create(dbs[0], tmp_path / "files")),
               (await SqliteBatchStore.open(dbs[1]), await LocalFileStore.create(dbs[1], tmp_path / "files")))
        for db in dbs:
            await db.close()
    else:
        from app.stores.postgres import open_pool
        from tests.support.postgres import fresh_database

        url = await fresh_database(request.getfixturevalue("postgres"))
        pools = [await open_pool(url, max_size=4) for _ in range(2)]
        yield ((PostgresBatchStore(pools[0]), PostgresFileStore(pools[0])),
               (PostgresBatchStore(pools[1]), PostgresFileStore(pools[1])))
        for pool in pools:
            await pool.close()


class Counting:
    """A ``dispatch`` that counts each request it runs (by its prompt)."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()

    async def __call__(self, digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        self.ran[orjson.loads(body)["messages"][0]["content"]] += 1
        await asyncio.sleep(0)
        return 200, answer(body)


def runner(pair: tuple[BatchStore, FileStore], dispatch: Counting,
           settings: RunnerSettings = FAST) -> BatchRunner:
    return BatchRunner(pair[0], pair[1], dispatch, known_model=lambda m: True, settings=settings)


async def check_once(store: BatchStore, batch: Batch, n: int, *dispatches: Counting) -> None:
    done = await until(lambda: store.refresh(batch),
                       lambda b: b.status in ("completed", "failed", "expired"), seconds=120)
    ran: Counter[str] = sum((d.ran for d in dispatches), Counter())
    assert done.status == "completed", done.errors
    assert (done.total, done.completed, done.failed) == (n, n, 0)
    assert ran == Counter({f"q{i}": 1 for i in range(n)})  # every line run, each once
    out = [r.custom_id for r in await outputs(store, batch, True)]
    assert sorted(out) == sorted(f"c{i}" for i in range(n))


async def test_two_workers_picking_up_one_batch_validate_it_once_and_run_each_line_once(
        two: Two) -> None:
    (a_pair, b_pair), n = two, 1000
    store, _, batch = await setup(a_pair, n)
    da, db = Counting(), Counting()
    # No worker dies here, so no line may be retaken: a lease long enough for a loaded machine
    # (with FAST's 1 s a renewal held up 0.7 s behind the other worker's writes let a running
    # line's lease run out, and it ran twice, in one CI run; retaking is the next test's subject)
    steady = replace(FAST, lease_seconds=30.0)
    a, b = runner(a_pair, da, steady), runner(b_pair, db, steady)
    async with running(a), running(b):
        await check_once(store, batch, n, da, db)
    assert da.ran and db.ran  # both ran lines: the line claim shares the work


async def test_a_runner_with_a_stale_view_rewrites_no_lines_of_a_batch_that_moved_on(
        two: Two) -> None:
    """The race seen with two worker processes: one finished validating and runs lines while
    the other, from a poll that saw the batch ``validating``, starts its validation over."""
    (a_pair, b_pair), n = two, 40
    store, _, batch = await setup(a_pair, n)
    stale = replace(batch)
    gate = asyncio.Event()

    class Gated(Counting):
        async def __call__(self, digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
            if sum(self.ran.values()) >= 10:
                await gate.wait()
            return await super().__call__(digest, path, body)

    da, db = Gated(), Counting()
    a = runner(a_pair, da, replace(FAST, slots=1))
    async with running(a):
        await until(lambda: store.refresh(batch), lambda x: x.completed >= 10)
        b = runner(b_pair, db)
        await b.advance(stale)  # it thinks the batch is still validating
        async def validating() -> int:
            return len(b._validating)

        await until(validating, lambda k: k == 0)
        assert await store.unfinished(batch.id) == n - 10  # nothing deleted, nothing re-added
        gate.set()
        async with running(b):
            await check_once(store, batch, n, da, db)


async def test_a_runner_killed_mid_validation_is_replaced_after_its_lease_not_before(
        two: Two) -> None:
    (a_pair, b_pair), n = two, 3000
    store, files, batch = await setup(a_pair, n)
    stuck, halfway, first = asyncio.Event(), asyncio.Event(), list[int]()

    class Stalling:
        """The first worker's file store: the input stops flowing after its first part."""

        def __getattr__(self, name: str) -> object:
            return getattr(files, name)

        async def open(self, file_id: str, owner: str,
                       ) -> tuple[StoredFile, AsyncIterator[bytes]] | None:
            opened = await files.open(file_id, owner)
            assert opened is not None
            meta, chunks = opened
            whole = b"".join([c async for c in chunks])
            first.append(whole[: len(whole) // 2].count(b"\n"))

            async def parts() -> AsyncIterator[bytes]:
                yield whole[: len(whole) // 2]
                halfway.set()
                await stuck.wait()
                yield whole[len(whole) // 2:]

            return meta, parts()

    class Claims:
        """A worker's batch store, noting when each claim it won runs out and when it won it."""

        def __init__(self, inner: BatchStore) -> None:
            self.inner, self.until, self.won = inner, list[float](), list[float]()

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        async def claim_batch(self, batch_id: str, worker: str, *, lease: float, now: float) -> bool:
            held = await self.inner.claim_batch(batch_id, worker, lease=lease, now=now)
            if held:
                self.until.append(now + lease)
                self.won.append(time.time())
            return held

    da, db = Counting(), Counting()
    a_claims, b_claims = Claims(store), Claims(b_pair[0])
    a = BatchRunner(a_claims, Stalling(), da, known_model=lambda m: True, settings=FAST)  # type: ignore[arg-type]
    b = runner((b_claims, b_pair[1]), db)  # type: ignore[arg-type]
    async with running(a):
        await asyncio.wait_for(halfway.wait(), 30)
        written = await until(lambda: store.unfinished(batch.id), lambda k: k == first[0])
        async with running(b):
            # a live holder keeps its claim (renewed) through three of its leases
            await asyncio.sleep(3 * FAST.lease_seconds)
            assert (await store.refresh(batch)).status == "validating"
            assert await store.unfinished(batch.id) == written  # b deleted and added nothing
            assert not db.ran and not b_claims.won
    # a is gone (kill -9: its claim is not released), its half-written lines still stored
    async with running(b):
        await until(lambda: store.refresh(batch), lambda x: x.status != "validating",
                    seconds=30)
        # b took over once a's last renewal had run out, not before (that renewal may have
        # been made up to a third of a lease before a was killed)
        assert b_claims.won[0] >= a_claims.until[-1], (b_claims.won[0], a_claims.until[-1])
        await check_once(store, batch, n, da, db)
    assert not da.ran


async def test_a_sqlite_store_from_before_the_claim_gets_its_columns_once(tmp_path: Path) -> None:
    from app.batches import sqlite_batches

    path = tmp_path / "old.sqlite"
    old = sqlite_batches._SCHEMA.replace("    claimed_by TEXT,\n    claim_until REAL\n", "")
    old = old.replace("usage TEXT NOT NULL DEFAULT '{}',", "usage TEXT NOT NULL DEFAULT '{}'")
    assert "claimed_by" not in old
    async with aiosqlite.connect(path) as db:
        await db.executescript(old)
        await db.commit()
    dbs = [await aiosqlite.connect(path) for _ in range(3)]
    try:
        for db in dbs:
            await configure(db)
        # worker processes starting together on the old file: each column is added once
        stores = await asyncio.gather(*(SqliteBatchStore.open(db) for db in dbs))
        async with dbs[0].execute("PRAGMA table_info(batches)") as cur:
            names = [row[1] for row in await cur.fetchall()]
        assert names.count("claimed_by") == 1 and names.count("claim_until") == 1
        now = int(time.time())
        await stores[0].create(Batch("batch_old", "alice", None, "/v1/chat/completions", "file-x",
                                     now, now + 60))
        assert await stores[1].claim_batch("batch_old", "w1", lease=30, now=now)
        assert not await stores[2].claim_batch("batch_old", "w2", lease=30, now=now)
        assert await stores[2].claim_batch("batch_old", "w2", lease=30, now=now + 31)  # lapsed
    finally:
        for db in dbs:
            await db.close()
