"""Small writes on the event loop's own thread (app/stores/sqlite_inline.py): made there when
the file is free (no hop to the connection's thread), on the thread when it is busy (and then
waited for, never on the loop), one in ``THREAD_EVERY`` on the thread so its connection keeps
the WAL checkpointed; the loop's connection never checkpoints; a ``:memory:`` store has none."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from app.stores import sqlite_inline
from app.stores.sqlite_responses import SqliteResponseStore

pytestmark = pytest.mark.asyncio


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


def _resource(n: int, status: str = "completed") -> dict[str, Any]:
    return {"id": f"resp_{n}", "created_at": n, "status": status, "output": [{"text": "x" * 500}]}


async def test_a_small_write_on_a_free_file_is_made_on_the_loops_thread(tmp_path: Path) -> None:
    store = await SqliteResponseStore.open(tmp_path / "r.sqlite3")
    hops = _Hops(store.connection)
    try:
        await store.put(_resource(1), [{"role": "user", "content": "hi"}], "alice")
        assert hops.n == 0
        hops.close()
        other = await SqliteResponseStore.open(tmp_path / "r.sqlite3")  # another process
        try:
            got = await other.get("resp_1", "alice")
            assert got is not None and got.input_items == [{"role": "user", "content": "hi"}]
        finally:
            await other.close()
        got = await store.get("resp_1", "alice")  # the store's own thread connection sees it
        assert got is not None and got.resource["status"] == "completed"
    finally:
        hops.close()
        await store.close()


async def test_a_large_write_takes_the_thread(tmp_path: Path) -> None:
    store = await SqliteResponseStore.open(tmp_path / "r.sqlite3")
    hops = _Hops(store.connection)
    try:
        big = [{"role": "user", "content": "x" * (sqlite_inline.SMALL_BYTES + 1)}]
        await store.put(_resource(1), big, "alice")
        assert hops.n == 1
        hops.close()
        got = await store.get("resp_1", "alice")
        assert got is not None and got.input_items == big
    finally:
        hops.close()
        await store.close()


async def test_a_busy_file_sends_the_write_to_the_thread_which_waits_for_it(tmp_path: Path) -> None:
    import asyncio
    import time

    path = tmp_path / "r.sqlite3"
    store = await SqliteResponseStore.open(path)
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process is writing
    asyncio.get_running_loop().call_later(0.3, holder.commit)
    hops = _Hops(store.connection)
    try:
        began = time.monotonic()
        await store.put(_resource(1), [], "alice")
        assert time.monotonic() - began >= 0.25  # waited for the file (on the thread)
        assert hops.n >= 1
        hops.close()
        assert await store.get("resp_1", "alice") is not None
    finally:
        hops.close()
        holder.close()
        await store.close()


async def test_the_wal_stays_bounded_and_the_loops_connection_never_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = await SqliteResponseStore.open(path)
    inline = sqlite_inline.of(store.connection)
    assert inline is not None
    assert inline.conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    hops = _Hops(store.connection)
    try:
        n = 40 * sqlite_inline.THREAD_EVERY
        for i in range(n):
            await store.put(_resource(i), [{"role": "user", "content": "y" * 2000}], "alice")
        assert hops.n == n // sqlite_inline.THREAD_EVERY  # the thread's turns, nothing else
        # ~4 pages a write: without the thread's checkpoints the WAL would hold ~10,000 pages
        wal = await asyncio.to_thread(os.path.getsize, f"{path}-wal")
        assert wal < 2_000 * 4096, wal
    finally:
        hops.close()
        await store.close()


async def test_a_failed_write_on_the_loops_thread_is_rolled_back_whole(tmp_path: Path) -> None:
    from app.stores.sqlite_write import write

    store = await SqliteResponseStore.open(tmp_path / "r.sqlite3")
    db = store.connection
    try:
        def bad(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO response_events (id, owner, events) VALUES ('a', 'o', x'00')")
            conn.execute("INSERT INTO response_events (id, owner, events) VALUES ('a', 'o', x'00')")

        with pytest.raises(sqlite3.IntegrityError):
            await write(db, bad, small=True)
        inline = sqlite_inline.of(db)
        assert inline is not None and not inline.conn.in_transaction
        async with db.execute("SELECT count(*) FROM response_events") as cur:
            assert await cur.fetchone() == (0,)
    finally:
        await store.close()


async def test_a_memory_store_has_no_loop_connection() -> None:
    store = await SqliteResponseStore.open(":memory:")
    try:
        assert sqlite_inline.of(store.connection) is None
        await store.put(_resource(1), [], "alice")
        assert await store.get("resp_1", "alice") is not None
    finally:
        await store.close()
