"""One write transaction in one hop to the connection's thread (app/stores/sqlite_write.py
``write``): whole or not at all, a busy file waited for up to its deadline (then 503
``store_busy``), a cancelled caller never leaves a transaction open; a stored response's
write is that one hop (it was five: BEGIN, three statements, COMMIT)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from app.stores import sqlite_db
from app.stores.sqlite_db import StoreBusy, configure
from app.stores.sqlite_responses import SqliteResponseStore
from app.stores.sqlite_write import write

pytestmark = pytest.mark.asyncio


async def _open(path: Path) -> aiosqlite.Connection:
    db = await aiosqlite.connect(str(path))
    await configure(db)
    await db.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")
    await db.commit()
    return db


async def _rows(db: aiosqlite.Connection) -> list[tuple[Any, ...]]:
    async with db.execute("SELECT k, v FROM t ORDER BY k") as cur:
        return [tuple(row) for row in await cur.fetchall()]


async def test_a_write_is_committed_whole_or_rolled_back_whole(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    try:
        def good(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO t VALUES (1, 'a')")
            return conn.execute("INSERT INTO t VALUES (2, 'b')").rowcount

        assert await write(db, good) == 1

        def bad(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (3, 'c')")
            conn.execute("INSERT INTO t VALUES (1, 'dup')")  # IntegrityError mid-way

        with pytest.raises(sqlite3.IntegrityError):
            await write(db, bad)
        assert not db.in_transaction
        assert await _rows(db) == [(1, "a"), (2, "b")]  # nothing of the failed one
        # committed: another connection sees it
        other = await _open(tmp_path / "w.sqlite3")
        assert await _rows(other) == [(1, "a"), (2, "b")]
        await other.close()
    finally:
        await db.close()


async def test_a_busy_file_is_waited_for(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    await db.execute("PRAGMA busy_timeout=20")  # SQLite's own wait short: ours retries
    holder = sqlite3.connect(str(tmp_path / "w.sqlite3"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (9, 'held')")
    asyncio.get_running_loop().call_later(0.3, holder.commit)
    try:
        began = time.monotonic()
        await write(db, lambda conn: conn.execute("INSERT INTO t VALUES (1, 'a')"))
        assert time.monotonic() - began >= 0.25
        assert await _rows(db) == [(1, "a"), (9, "held")]
    finally:
        holder.close()
        await db.close()


async def test_a_file_busy_past_the_deadline_is_store_busy(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_db, "BUSY_MS", 300)
    db = await _open(tmp_path / "w.sqlite3")
    await db.execute("PRAGMA busy_timeout=20")
    holder = sqlite3.connect(str(tmp_path / "w.sqlite3"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        began = time.monotonic()
        with pytest.raises(StoreBusy) as raised:
            await write(db, lambda conn: conn.execute("INSERT INTO t VALUES (1, 'a')"))
        assert 0.25 <= time.monotonic() - began < 3
        assert raised.value.status == 503
        holder.rollback()
        await write(db, lambda conn: conn.execute("INSERT INTO t VALUES (1, 'a')"))  # usable again
        assert await _rows(db) == [(1, "a")]
    finally:
        holder.close()
        await db.close()


async def test_a_cancelled_caller_leaves_once_the_transaction_has_finished(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    try:
        def slow(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (1, 'a')")
            time.sleep(0.2)  # in the connection's thread
            conn.execute("INSERT INTO t VALUES (2, 'b')")

        task = asyncio.ensure_future(write(db, slow))
        await asyncio.sleep(0.05)
        task.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - began >= 0.1  # it waited for the transaction's end
        assert not db.in_transaction
        assert await _rows(db) == [(1, "a"), (2, "b")]  # one transaction: it ran whole
    finally:
        await db.close()


@pytest.mark.parametrize("item_bytes", [10, 20_000])  # a plain item; one stored as a blob
async def test_a_stored_response_is_one_hop_to_the_connections_thread(tmp_path: Path, item_bytes: int,
                                                                      ) -> None:
    store = await SqliteResponseStore.open(tmp_path / "r.sqlite3")
    db = store.connection
    hops = 0
    queue: Any = db._tx  # every job for the connection's thread goes through it

    class Counted:
        def put_nowait(self, job: Any) -> None:
            nonlocal hops
            hops += 1
            queue.put_nowait(job)

    db._tx = Counted()  # type: ignore[assignment]
    try:
        items = [{"role": "user", "content": "x" * item_bytes}]
        resource = {"id": "resp_1", "created_at": 1, "status": "in_progress", "output": []}
        await store.put(resource, items, "alice")
        assert hops == 1
        await store.put({**resource, "status": "completed"}, items, "alice")
        assert hops == 2
        await store.put_events("resp_1", "alice", [{"type": "response.completed"}])
        assert hops == 3
        db._tx = queue
        got = await store.get("resp_1", "alice")
        assert got is not None and got.resource["status"] == "completed"
        assert got.input_items == items
        assert await store.get("resp_1", "bob") is None
        assert await store.get_events("resp_1", "alice") == [{"type": "response.completed"}]
    finally:
        db._tx = queue
        await store.close()


async def test_a_write_on_a_closed_connection_fails_at_once(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    await db.close()
    with pytest.raises(ValueError, match="connection"):  # not a job no thread will ever run
        await asyncio.wait_for(write(db, lambda conn: conn.execute("INSERT INTO t VALUES (1, 'a')")), 2)


async def test_writes_stay_in_the_order_they_were_made(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    try:
        def insert(n: int) -> Callable[[sqlite3.Connection], object]:
            return lambda conn: conn.execute("INSERT INTO t (v) VALUES (?)", (str(n),))

        await asyncio.gather(*(write(db, insert(n)) for n in range(20)))  # k: the commit order
        async with db.execute("SELECT v FROM t ORDER BY k") as cur:
            rows = await cur.fetchall()
        assert [int(v) for (v,) in rows] == list(range(20))
    finally:
        await db.close()


def _slow_insert(k: int, seconds: float) -> Callable[[sqlite3.Connection], int]:
    def work(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t VALUES (?, ?)", (k, f"v{k}"))
        time.sleep(seconds)  # in the connection's thread: the others queue meanwhile
        return k

    return work


class _Hops:
    """Counts the jobs put on a connection's thread."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db, self.queue, self.n = db, db._tx, 0
        db._tx = self  # type: ignore[assignment]

    def put_nowait(self, job: Any) -> None:
        self.n += 1
        self.queue.put_nowait(job)

    def close(self) -> None:
        self.db._tx = self.queue


async def test_writes_made_while_one_runs_are_committed_together_each_answered(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    hops = _Hops(db)
    try:
        first = asyncio.ensure_future(write(db, _slow_insert(1, 0.2)))
        await asyncio.sleep(0.05)  # under way
        rest = [asyncio.ensure_future(write(db, _slow_insert(k, 0))) for k in range(2, 12)]
        assert await asyncio.gather(first, *rest) == list(range(1, 12))
        assert hops.n == 2  # the lone write, then the ten queued behind it in one transaction
        assert await _rows(db) == [(k, f"v{k}") for k in range(1, 12)]
    finally:
        hops.close()
        await db.close()


async def test_a_failing_write_in_a_group_fails_alone(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    try:
        def twice(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (20, 'half')")  # undone with its savepoint
            conn.execute("INSERT INTO t VALUES (1, 'dup')")

        first = asyncio.ensure_future(write(db, _slow_insert(1, 0.2)))
        await asyncio.sleep(0.05)
        group = [asyncio.ensure_future(write(db, w))
                 for w in (_slow_insert(2, 0), twice, _slow_insert(3, 0))]
        answers = await asyncio.gather(first, *group, return_exceptions=True)
        assert answers[:2] == [1, 2] and answers[3] == 3
        assert isinstance(answers[2], sqlite3.IntegrityError)
        assert await _rows(db) == [(1, "v1"), (2, "v2"), (3, "v3")]
        assert not db.in_transaction
    finally:
        await db.close()


async def test_a_caller_gone_while_queued_has_its_write_never_made(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    try:
        first = asyncio.ensure_future(write(db, _slow_insert(1, 0.2)))
        await asyncio.sleep(0.05)
        gone = asyncio.ensure_future(write(db, _slow_insert(2, 0)))
        kept = asyncio.ensure_future(write(db, _slow_insert(3, 0)))
        await asyncio.sleep(0.01)
        gone.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert time.monotonic() - began < 0.1  # it left at once, not after the write under way
        assert await asyncio.gather(first, kept) == [1, 3]
        assert await _rows(db) == [(1, "v1"), (3, "v3")]
    finally:
        await db.close()


async def test_a_caller_gone_while_its_group_runs_leaves_once_it_committed(tmp_path: Path) -> None:
    db = await _open(tmp_path / "w.sqlite3")
    try:
        first = asyncio.ensure_future(write(db, _slow_insert(1, 0.1)))
        await asyncio.sleep(0.05)
        grouped = asyncio.ensure_future(write(db, _slow_insert(2, 0.3)))
        await first
        await asyncio.sleep(0.05)  # its group under way in the thread
        grouped.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await grouped
        assert time.monotonic() - began >= 0.15  # it waited for the transaction's end
        assert not db.in_transaction
        assert await _rows(db) == [(1, "v1"), (2, "v2")]  # committed whole
    finally:
        await db.close()


async def test_a_group_waits_for_a_busy_file_each_write_up_to_its_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_db, "BUSY_MS", 400)
    db = await _open(tmp_path / "w.sqlite3")
    await db.execute("PRAGMA busy_timeout=10")
    holder = sqlite3.connect(str(tmp_path / "w.sqlite3"), isolation_level=None)
    try:
        first = asyncio.ensure_future(write(db, _slow_insert(1, 0.1)))
        await asyncio.sleep(0.03)
        early = asyncio.ensure_future(write(db, _slow_insert(2, 0)))
        holder.execute("BEGIN IMMEDIATE")  # another process takes the file before the group
        await first
        monkeypatch.setattr(sqlite_db, "BUSY_MS", 5000)
        late = asyncio.ensure_future(write(db, _slow_insert(3, 0)))  # queued behind the group
        with pytest.raises(StoreBusy):
            await early  # its 0.4 s ran out
        holder.rollback()
        assert await late == 3
        assert await _rows(db) == [(1, "v1"), (3, "v3")]
    finally:
        holder.close()
        await db.close()
