"""Worker processes opening one older SQLite store at once (``serve --workers N`` after an
upgrade): each missing column is added once, no worker fails its start-up with ``duplicate
column name`` (before, 11 of 30 such pairs of connections did)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from app.stores.sqlite_responses import SqliteResponseStore

pytestmark = pytest.mark.asyncio

BEFORE_TENANCY = ("CREATE TABLE responses (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, "
                  "status TEXT NOT NULL, resource BLOB NOT NULL, input_items BLOB NOT NULL)")


async def test_two_connections_opening_an_older_store_at_once_both_start(tmp_path: Path) -> None:
    for attempt in range(30):  # the open is a few statements: race it many times
        path = tmp_path / f"r{attempt}.sqlite3"
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # as the gateway always made its stores
            conn.execute(BEFORE_TENANCY)
            conn.execute("INSERT INTO responses VALUES ('resp_old', 1, 'completed', x'7b7d', x'5b5d')")
        opened = await asyncio.gather(*(SqliteResponseStore.open(path) for _ in range(3)),
                                      return_exceptions=True)
        errors = [o for o in opened if isinstance(o, BaseException)]
        for store in opened:
            if isinstance(store, SqliteResponseStore):
                await store.close()
        assert not errors, (attempt, errors)
        with sqlite3.connect(path) as conn:
            columns = [row[1] for row in conn.execute("PRAGMA table_info(responses)")]
            rows = conn.execute("SELECT id, owner, cancel_requested FROM responses").fetchall()
        assert columns.count("owner") == 1 and "updated_at" in columns and "cancel_requested" in columns
        assert rows == [("resp_old", "", 0)]  # the old row kept, belonging to no key


async def test_a_store_opened_while_another_connection_writes_to_the_new_file_waits_for_it(
        tmp_path: Path) -> None:
    """Switching a new file to WAL needs it to itself, and SQLite answers ``database is
    locked`` at once while another connection holds its write lock (no busy wait there): one
    of two workers starting on a new store failed its start, and ``serve`` stopped."""
    import threading

    path = tmp_path / "new.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE early (x INTEGER)")  # still in the default rollback journal
    other.execute("BEGIN IMMEDIATE")  # another worker's first write, under way
    threading.Timer(0.3, other.execute, ["COMMIT"]).start()
    store = await SqliteResponseStore.open(path)
    try:
        async with store.connection.execute("PRAGMA journal_mode") as cur:
            assert (await cur.fetchone()) == ("wal",)
    finally:
        await store.close()
        other.close()
