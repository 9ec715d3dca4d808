"""A cancel recorded in the response store (``request_cancel``) and read back by the owner's
heartbeat (``touch``), on every store (SQLite, PostgreSQL, memory): only for the owner's
responses still in flight, kept across the run's own writes, and reported only for the ids the
heartbeat names.  SQLite files and PostgreSQL databases from before the flag get it on open."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
import orjson

from app.stores.base import ResponseStore
from app.stores.postgres import MIGRATIONS, PostgresResponseStore, open_pool
from app.stores.sqlite_responses import SqliteResponseStore

Json = dict[str, Any]


def response(rid: str, status: str = "in_progress") -> Json:
    return {"id": rid, "object": "response", "created_at": 1, "status": status, "output": []}


async def test_a_cancel_is_recorded_for_the_owners_runs_in_flight(responses: ResponseStore) -> None:
    await responses.put(response("run"), [], "alice")
    await responses.put(response("queued", "queued"), [], "alice")
    await responses.put(response("done", "completed"), [], "alice")
    await responses.put(response("other"), [], "alice")
    assert await responses.touch(["run", "queued", "done", "other"]) == set()
    assert not await responses.request_cancel("run", "bob")  # another owner's: not recorded
    assert not await responses.request_cancel("missing", "alice")
    assert not await responses.request_cancel("done", "alice")  # ended: nothing to cancel
    assert await responses.touch(["run", "queued", "done", "other"]) == set()
    assert await responses.request_cancel("run", "alice")
    assert await responses.request_cancel("queued", "alice")
    assert await responses.request_cancel("run", "alice")  # idempotent
    assert await responses.touch(["run", "queued", "done", "other", "missing"]) == {"run", "queued"}
    assert await responses.touch(["other"]) == set()  # only the ids the heartbeat names
    assert await responses.touch([]) == set()


async def test_the_heartbeat_still_renews_and_the_request_outlives_the_runs_writes(
        responses: ResponseStore) -> None:
    await responses.put(response("run"), [], "alice")
    assert await responses.request_cancel("run", "alice")
    before = await responses.get("run", "alice")
    assert before is not None
    assert await responses.touch(["run"]) == {"run"}
    after = await responses.get("run", "alice")
    assert after is not None and after.updated_at >= before.updated_at
    assert after.resource == before.resource  # the flag is not part of the resource
    await responses.put(response("run"), [{"id": "i"}], "alice")  # the run writes it again
    assert await responses.touch(["run"]) == {"run"}
    await responses.put(response("run", "cancelled"), [], "alice")  # its end
    assert not await responses.request_cancel("run", "alice")
    assert await responses.delete("run", "alice")
    assert await responses.touch(["run"]) == set()


async def test_a_sqlite_file_from_before_the_flag_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    async with aiosqlite.connect(path) as old:  # the table as a release before the flag made it
        await old.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, "
                          "status TEXT NOT NULL, resource BLOB NOT NULL, input_items BLOB NOT NULL, "
                          "owner TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL DEFAULT 0)")
        await old.execute("INSERT INTO responses VALUES ('r-old', 1, 'in_progress', ?, ?, 'alice', 0)",
                          (orjson.dumps(response("r-old")), orjson.dumps([])))
        await old.commit()
    store = await SqliteResponseStore.open(path)
    try:
        assert await store.touch(["r-old"]) == set()
        assert await store.request_cancel("r-old", "alice")
        assert await store.touch(["r-old"]) == {"r-old"}
    finally:
        await store.close()


async def test_a_postgres_database_from_before_the_flag_gets_it(postgres: str) -> None:
    """A database at the step before the flag (with a run in flight) is upgraded at start."""
    name = f"c{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres)
    await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    url = postgres.rsplit("/", 1)[0] + f"/{name}"
    step = next(n for n, sql in enumerate(MIGRATIONS, 1) if "cancel_requested" in sql)
    old = await asyncpg.connect(url)
    await old.execute("CREATE TABLE ocm_schema (version INT PRIMARY KEY, applied_at DOUBLE PRECISION "
                      "NOT NULL)")
    for version, sql in enumerate(MIGRATIONS[:step - 1], 1):
        await old.execute(sql)
        await old.execute("INSERT INTO ocm_schema VALUES ($1, 0)", version)
    await old.execute("INSERT INTO responses (id, owner, created_at, status, resource, input_items, "
                      "updated_at) VALUES ('r-old', 'alice', 1, 'in_progress', $1, $2, 0)",
                      orjson.dumps(response("r-old")), orjson.dumps([]))
    await old.close()
    pool = await open_pool(url, max_size=2)
    try:
        store = PostgresResponseStore(pool)
        assert await store.touch(["r-old"]) == set()
        assert await store.request_cancel("r-old", "alice")
        assert await store.touch(["r-old"]) == {"r-old"}
    finally:
        await pool.close()
