"""The response store on SQLite (WAL) through aiosqlite (the contract: :mod:`app.stores.base`).

Each stored response keeps its resource (the JSON the API returns) and its full
input context in wire form (previous input + previous output + new input), which is
exactly what ``previous_response_id`` needs to continue from it, and its owner (the
tenant that created it): every read and delete is scoped to the owner. A response is written
when its run starts and when it ends; in between its process touches ``updated_at`` as a
heartbeat, so a run whose process died (kill -9) can be told from one still going, and the
heartbeat reads back ``cancel_requested`` (a cancel another process recorded for it).  A
background response's streamed events are kept too (``response_events``), so a reader can
replay them after its end (``GET /v1/responses/{id}?stream=true``).  Large context items are
stored once per owner (``blobs``, referenced from ``response_blobs``: :mod:`app.stores.blobs`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import zlib
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

from app.stores import blobs
from app.stores.base import StoredResponse
from app.stores.sqlite_db import configure, transaction
from app.stores.sqlite_write import write

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    resource BLOB NOT NULL,
    input_items BLOB NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS response_events (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    events BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS blobs (
    owner TEXT NOT NULL,
    digest TEXT NOT NULL,
    data BLOB NOT NULL,
    used_at REAL NOT NULL,
    PRIMARY KEY (owner, digest)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS response_blobs (
    id TEXT NOT NULL,
    owner TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (id, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS response_blobs_digest ON response_blobs (owner, digest)
"""
_ORPHANS = ("DELETE FROM blobs WHERE {where} NOT EXISTS (SELECT 1 FROM response_blobs r "
            "WHERE r.owner = blobs.owner AND r.digest = blobs.digest)")


_PUT = ("INSERT INTO responses (id, created_at, status, resource, input_items, owner, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET created_at = excluded.created_at, "
        "status = excluded.status, resource = excluded.resource, input_items = excluded.input_items, "
        "owner = excluded.owner, updated_at = excluded.updated_at")


def _prepare(path: Path) -> Path:
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class SqliteResponseStore:
    """:class:`~app.stores.base.ResponseStore` on SQLite."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: str | Path) -> SqliteResponseStore:
        if str(path) != ":memory:":
            path = await asyncio.to_thread(_prepare, Path(path))
        db = await aiosqlite.connect(str(path))
        try:
            await configure(db)
            await db.executescript(_SCHEMA)
            # The columns are read and added under the file's write lock: worker processes
            # opening an older store at once add each column once (the second waits, then finds it).
            async with transaction(db):
                async with db.execute("PRAGMA table_info(responses)") as cur:
                    columns = {row[1] for row in await cur.fetchall()}
                if "owner" not in columns:  # a store from before tenancy: its rows belong to no key
                    await db.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
                if "updated_at" not in columns:
                    await db.execute("ALTER TABLE responses ADD COLUMN updated_at REAL NOT NULL DEFAULT 0")
                if "cancel_requested" not in columns:
                    await db.execute("ALTER TABLE responses ADD COLUMN cancel_requested INTEGER NOT NULL "
                                     "DEFAULT 0")
        except BaseException:
            await db.close()  # its thread is not a daemon: left open, the process could not exit
            raise
        return cls(db)

    @property
    def connection(self) -> aiosqlite.Connection:
        """The database connection (a store that layers over this one shares it)."""
        return self._db

    async def close(self) -> None:
        await self._db.close()

    async def journal_mode(self) -> str:
        async with self._db.execute("PRAGMA journal_mode") as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else ""

    async def put(self, resource: dict[str, Any], input_items: list[dict[str, Any]], owner: str) -> None:
        # An upsert, not INSERT OR REPLACE: the row keeps its rowid, which is creation order.
        # One hop to the connection's thread for the whole transaction (sqlite_write.write).
        stored, now, rid = blobs.split(input_items), time.time(), resource["id"]
        row = (rid, resource["created_at"], resource["status"], orjson.dumps(resource), stored.items,
               owner, now)

        def work(conn: sqlite3.Connection) -> None:
            if stored.blobs:
                conn.executemany(
                    "INSERT INTO blobs (owner, digest, data, used_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (owner, digest) DO UPDATE SET used_at = excluded.used_at",
                    [(owner, digest, data, now) for digest, data in stored.blobs.items()])
            conn.execute("DELETE FROM response_blobs WHERE id = ?", (rid,))
            if stored.blobs:
                conn.executemany("INSERT INTO response_blobs (id, owner, digest) VALUES (?, ?, ?)",
                                 [(rid, owner, digest) for digest in stored.blobs])
            conn.execute(_PUT, row)

        await write(self._db, work)

    async def touch(self, response_ids: list[str]) -> set[str]:
        """Heartbeat: these responses are still being generated by this process; those of
        them whose cancel was requested (:meth:`request_cancel`)."""
        if not response_ids:
            return set()
        marks = ",".join("?" * len(response_ids))
        async with transaction(self._db) as db:
            await db.execute(f"UPDATE responses SET updated_at = ? WHERE id IN ({marks})",
                             (time.time(), *response_ids))
            async with db.execute(f"SELECT id FROM responses WHERE cancel_requested <> 0 AND id IN "
                                  f"({marks})", response_ids) as cur:
                return {str(row[0]) for row in await cur.fetchall()}

    async def request_cancel(self, response_id: str, owner: str) -> bool:
        """Record a cancel of ``owner``'s response still in flight (another process runs it)."""
        async with transaction(self._db) as db:
            cur = await db.execute("UPDATE responses SET cancel_requested = 1 WHERE id = ? AND "
                                   "owner = ? AND status IN ('queued', 'in_progress')",
                                   (response_id, owner))
        return (cur.rowcount or 0) > 0

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response ``response_id`` if ``owner`` stored it (another tenant's is None)."""
        async with self._db.execute(
                "SELECT resource, input_items, updated_at FROM responses WHERE id = ? AND owner = ?",
                (response_id, owner)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        items, digests = blobs.references(row[1])
        found: dict[str, bytes] = {}
        if digests:
            marks = ",".join("?" * len(digests))
            async with self._db.execute(f"SELECT digest, data FROM blobs WHERE owner = ? AND digest "
                                        f"IN ({marks})", (owner, *digests)) as cur:
                found = {digest: data for digest, data in await cur.fetchall()}
        return blobs.stored(orjson.loads(row[0]), items, found, float(row[2]))

    async def delete(self, response_id: str, owner: str) -> bool:
        """The response, its events, and the blobs only it referenced."""
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM responses WHERE id = ? AND owner = ?",
                                   (response_id, owner))
            await db.execute("DELETE FROM response_events WHERE id = ? AND owner = ?",
                             (response_id, owner))
            async with db.execute("SELECT digest FROM response_blobs WHERE id = ? AND owner = ?",
                                  (response_id, owner)) as found:
                digests = [row[0] for row in await found.fetchall()]
            if digests:
                await db.execute("DELETE FROM response_blobs WHERE id = ? AND owner = ?",
                                 (response_id, owner))
                marks = ",".join("?" * len(digests))
                await db.execute(_ORPHANS.format(where=f"owner = ? AND digest IN ({marks}) AND"),
                                 (owner, *digests))
        return (cur.rowcount or 0) > 0

    async def blob_sizes(self, owner: str) -> dict[str, int]:
        """``owner``'s stored blobs: digest -> bytes."""
        async with self._db.execute("SELECT digest, length(data) FROM blobs WHERE owner = ?",
                                    (owner,)) as cur:
            return {digest: int(size) for digest, size in await cur.fetchall()}

    async def put_events(self, response_id: str, owner: str, events: list[dict[str, Any]]) -> None:
        """A background response's streamed events, for readers after its end (zlib: deltas
        repeat a lot)."""
        blob = zlib.compress(orjson.dumps(events), 1)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO response_events (id, owner, events) VALUES (?, ?, ?) "
                         "ON CONFLICT(id) DO UPDATE SET owner = excluded.owner, events = excluded.events",
                         (response_id, owner, blob))

        await write(self._db, work)

    async def get_events(self, response_id: str, owner: str) -> list[dict[str, Any]] | None:
        async with self._db.execute("SELECT events FROM response_events WHERE id = ? AND owner = ?",
                                    (response_id, owner)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        events: list[dict[str, Any]] = orjson.loads(zlib.decompress(row[0]))
        return events

    async def expire(self, created_before: int) -> int:
        async with transaction(self._db) as db:
            await db.execute("DELETE FROM response_events WHERE id IN "
                             "(SELECT id FROM responses WHERE created_at < ?)", (created_before,))
            await db.execute("DELETE FROM response_blobs WHERE id IN "
                             "(SELECT id FROM responses WHERE created_at < ?)", (created_before,))
            cur = await db.execute("DELETE FROM responses WHERE created_at < ?", (created_before,))
            await db.execute(_ORPHANS.format(where="used_at < ? AND"),
                             (time.time() - blobs.SWEEP_GRACE,))
        return cur.rowcount or 0

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   ) -> list[dict[str, Any]] | None:
        """Up to ``limit`` of ``owner``'s resources in creation order (rowid; newest first unless
        ``ascending``), starting after the response ``after``; None when ``after`` is not one
        of ``owner``'s responses."""
        sign, order = (">", "ASC") if ascending else ("<", "DESC")
        where, args = "owner = ?", [owner]
        if after is not None:
            async with self._db.execute("SELECT rowid FROM responses WHERE id = ? AND owner = ?",
                                        (after, owner)) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            where += f" AND rowid {sign} ?"
            args.append(row[0])
        async with self._db.execute(
                f"SELECT resource FROM responses WHERE {where} ORDER BY rowid {order} LIMIT ?",
                (*args, limit)) as cur:
            rows = await cur.fetchall()
        return [orjson.loads(row[0]) for row in rows]
