"""The vector-store catalog on SQLite (the contract: :mod:`app.knowledge.catalog`): vector
stores, their files and batches in the SQLite file beside the other tables, on the connection
the stores share, every write one ``BEGIN IMMEDIATE`` transaction
(:func:`app.stores.sqlite_db.transaction`).  The tables and row decoders are
:mod:`app.knowledge.sqlite_catalog_rows`; the ingestion queue (claims, leases, a restart's
resumed jobs) is :mod:`app.knowledge.sqlite_jobs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from app.knowledge.catalog import (
    TOUCH_EVERY,
    BatchRecord,
    FileCounts,
    FileRecord,
    NewEntry,
    NewStore,
    Page,
    StoreChanges,
    StoreRecord,
    chunking_json,
)
from app.knowledge.sqlite_catalog_rows import FILE_COLUMNS as _FILE
from app.knowledge.sqlite_catalog_rows import SCHEMA, file_row, space_of, store_row
from app.knowledge.sqlite_catalog_rows import STORE_COLUMNS as _STORE
from app.knowledge.sqlite_catalog_rows import as_json as _json
from app.knowledge.sqlite_catalog_rows import space_columns as _space
from app.knowledge.sqlite_jobs import SqliteJobs, resume_claims
from app.knowledge.vectors import Attributes, new_store_id
from app.stores.sqlite_db import transaction

__all__ = ["SqliteCatalog", "file_row", "space_of", "store_row"]


class SqliteCatalog(SqliteJobs):
    """:class:`~app.knowledge.catalog.VectorStoreCatalog` on the shared SQLite connection."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def create(cls, db: aiosqlite.Connection) -> SqliteCatalog:
        await db.executescript(SCHEMA)
        await db.commit()
        await resume_claims(db)
        return cls(db)

    async def _counts(self, store_ids: Sequence[str]) -> dict[str, tuple[FileCounts, int]]:
        marks = ", ".join("?" * len(store_ids))
        rows = await self._all(
            "SELECT vector_store_id, status, COUNT(*), SUM(CASE WHEN status = 'completed' THEN usage_bytes "
            f"ELSE 0 END) FROM vector_store_files WHERE vector_store_id IN ({marks}) "
            "GROUP BY vector_store_id, status", store_ids)
        found: dict[str, dict[str, int]] = {}
        usage: dict[str, int] = {}
        for sid, status, n, used in rows:
            found.setdefault(sid, {})[status] = int(n)
            usage[sid] = usage.get(sid, 0) + int(used or 0)
        return {sid: (FileCounts.of(found.get(sid, {})), usage.get(sid, 0)) for sid in store_ids}

    async def _stores(self, rows: list[Any]) -> list[StoreRecord]:
        counts = await self._counts([str(r[0]) for r in rows]) if rows else {}
        return [store_row(r, *counts[str(r[0])]) for r in rows]

    async def create_store(self, store: NewStore, entries: Sequence[NewEntry], now: int) -> StoreRecord:
        sid = new_store_id()
        expires = None if store.expires_after_days is None else now + store.expires_after_days * 86400
        async with transaction(self._db) as db:
            await db.execute(
                f"INSERT INTO vector_stores ({_STORE}, description) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)",
                (sid, store.owner, now, store.name, None if store.metadata is None else _json(store.metadata),
                 store.expires_after_days, expires, now, *_space(store.space), store.description))
            await self._insert_files(db, store.owner, sid, entries, now, None)
        found = await self.get_store(store.owner, sid)
        assert found is not None
        return found

    async def get_store(self, owner: str, store_id: str) -> StoreRecord | None:
        rows = await self._all(f"SELECT {_STORE} FROM vector_stores WHERE id = ? AND owner = ?",
                               (store_id, owner))
        found = await self._stores(rows)
        return found[0] if found else None

    async def _cursor(self, table: str, where: str, args: Sequence[Any], page: Page,
                      ) -> tuple[str, list[Any], str] | None:
        """The cursor's condition, arguments and order (``None``: no such cursor)."""
        cursor, forward = (page.before, False) if page.after is None and page.before else (page.after, True)
        ascending = page.ascending == forward  # reading backwards from a ``before`` cursor
        order = "ASC" if ascending else "DESC"
        if cursor is None:
            return where, list(args), order
        key = "id" if table == "vector_stores" else "file_id"
        found = await self._all(f"SELECT seq FROM {table} WHERE {where} AND {key} = ?", (*args, cursor))
        if not found:
            return None
        return f"{where} AND seq {'>' if ascending else '<'} ?", [*args, found[0][0]], order

    async def page_stores(self, owner: str, page: Page) -> list[StoreRecord] | None:
        found = await self._cursor("vector_stores", "owner = ?", (owner,), page)
        if found is None:
            return None
        where, args, order = found
        rows = await self._all(f"SELECT {_STORE} FROM vector_stores WHERE {where} ORDER BY seq {order} "
                               "LIMIT ?", (*args, page.limit))
        if page.before is not None and page.after is None:
            rows.reverse()
        return await self._stores(rows)

    async def update_store(self, owner: str, store_id: str, changes: StoreChanges,
                           now: int) -> StoreRecord | None:
        sets: list[str] = []
        args: list[Any] = []
        if changes.set_name:
            sets.append("name = ?")
            args.append(changes.name or "")
        if changes.set_metadata:
            sets.append("metadata = ?")
            args.append(None if changes.metadata is None else _json(changes.metadata))
        if changes.set_expiry:
            sets += ["expires_after_days = ?",
                     "expires_at = CASE WHEN ? IS NULL THEN NULL ELSE last_active_at + ? * 86400 END"]
            args += [changes.expires_after_days] * 3
        if sets:
            async with transaction(self._db) as db:
                await db.execute(f"UPDATE vector_stores SET {', '.join(sets)} WHERE id = ? AND owner = ?",
                                 (*args, store_id, owner))
        return await self.get_store(owner, store_id)

    async def delete_store(self, owner: str, store_id: str) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM vector_stores WHERE id = ? AND owner = ?", (store_id, owner))
            if cur.rowcount == 0:
                return False
            for table in ("vector_store_files", "vector_store_batch_files", "ingest_jobs"):
                await db.execute(f"DELETE FROM {table} WHERE vector_store_id = ?", (store_id,))
            await db.execute("DELETE FROM vector_store_batches WHERE vector_store_id = ?", (store_id,))
        return True

    async def _insert_files(self, db: aiosqlite.Connection, owner: str, store_id: str,
                            entries: Sequence[NewEntry], now: int, batch_id: str | None) -> None:
        for e in entries:
            key = (store_id, e.file_id)
            await db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?", key)
            await db.execute("DELETE FROM ingest_jobs WHERE vector_store_id = ? AND file_id = ?", key)
            await db.execute(
                "INSERT INTO vector_store_files (vector_store_id, file_id, owner, created_at, status, "
                "attributes, chunking, filename) VALUES (?, ?, ?, ?, 'in_progress', ?, ?, ?)",
                (store_id, e.file_id, owner, now, _json(dict(e.attributes)), _json(chunking_json(e.chunking)),
                 e.filename))
            await db.execute("INSERT INTO ingest_jobs (vector_store_id, file_id) VALUES (?, ?)", key)
            if batch_id is not None:
                await db.execute("INSERT OR IGNORE INTO vector_store_batch_files VALUES (?, ?, ?)",
                                 (batch_id, store_id, e.file_id))

    async def add_files(self, owner: str, store_id: str, entries: Sequence[NewEntry], now: int,
                        batch_id: str | None = None) -> list[FileRecord] | None:
        async with transaction(self._db) as db:
            async with db.execute("SELECT expired FROM vector_stores WHERE id = ? AND owner = ?",
                                  (store_id, owner)) as cur:
                if await cur.fetchone() is None:
                    return None
            if batch_id is not None:
                await db.execute("INSERT INTO vector_store_batches VALUES (?, ?, ?, ?, 0)",
                                 (batch_id, store_id, owner, now))
            await self._insert_files(db, owner, store_id, entries, now, batch_id)
        found = [await self.get_file(owner, store_id, e.file_id) for e in entries]
        return [f for f in found if f is not None]

    async def get_file(self, owner: str, store_id: str, file_id: str) -> FileRecord | None:
        rows = await self._all(f"SELECT {_FILE} FROM vector_store_files f WHERE f.vector_store_id = ? "
                               "AND f.file_id = ? AND f.owner = ?", (store_id, file_id, owner))
        return file_row(rows[0]) if rows else None

    async def page_files(self, owner: str, store_id: str, page: Page, *, status: str | None = None,
                         batch_id: str | None = None) -> list[FileRecord] | None:
        found = await self._cursor("vector_store_files", "vector_store_id = ? AND owner = ?",
                                   (store_id, owner), page)
        if found is None:
            return None
        where, args, order = found
        where = " AND ".join(f"f.{w.strip()}" for w in where.split(" AND "))
        if status is not None:
            where, args = where + " AND f.status = ?", [*args, status]
        join = ""
        if batch_id is not None:
            join = ("JOIN vector_store_batch_files b ON b.vector_store_id = f.vector_store_id "
                    "AND b.file_id = f.file_id AND b.batch_id = ?")
            args = [batch_id, *args]
        rows = await self._all(f"SELECT {_FILE} FROM vector_store_files f {join} WHERE {where} "
                               f"ORDER BY f.seq {order} LIMIT ?", (*args, page.limit))
        if page.before is not None and page.after is None:
            rows.reverse()
        return [file_row(r) for r in rows]

    async def set_attributes(self, owner: str, store_id: str, file_id: str,
                             attributes: Attributes) -> FileRecord | None:
        async with transaction(self._db) as db:
            await db.execute("UPDATE vector_store_files SET attributes = ? WHERE vector_store_id = ? AND "
                             "file_id = ? AND owner = ?", (_json(dict(attributes)), store_id, file_id, owner))
        return await self.get_file(owner, store_id, file_id)

    async def remove_file(self, owner: str, store_id: str, file_id: str) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? "
                                   "AND owner = ?", (store_id, file_id, owner))
            if cur.rowcount == 0:
                return False
            await db.execute("DELETE FROM ingest_jobs WHERE vector_store_id = ? AND file_id = ?",
                             (store_id, file_id))
        return True

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord | None:
        rows = await self._all("SELECT id, vector_store_id, owner, created_at, cancelled FROM "
                               "vector_store_batches WHERE id = ? AND vector_store_id = ? AND owner = ?",
                               (batch_id, store_id, owner))
        if not rows:
            return None
        counts = await self._all(
            "SELECT f.status, COUNT(*) FROM vector_store_batch_files b JOIN vector_store_files f ON "
            "f.vector_store_id = b.vector_store_id AND f.file_id = b.file_id WHERE b.batch_id = ? "
            "GROUP BY f.status", (batch_id,))
        bid, sid, who, created, cancelled = rows[0]
        return BatchRecord(bid, sid, who, int(created), bool(cancelled),
                           FileCounts.of({s: int(n) for s, n in counts}))

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord | None:
        async with transaction(self._db) as db:
            cur = await db.execute("UPDATE vector_store_batches SET cancelled = 1 WHERE id = ? AND "
                                   "vector_store_id = ? AND owner = ?", (batch_id, store_id, owner))
            if cur.rowcount:
                members = ("SELECT file_id FROM vector_store_batch_files WHERE batch_id = ?")
                await db.execute("DELETE FROM ingest_jobs WHERE vector_store_id = ? AND file_id IN "
                                 f"({members}) AND file_id IN (SELECT file_id FROM vector_store_files WHERE "
                                 "vector_store_id = ? AND status = 'in_progress')",
                                 (store_id, batch_id, store_id))
                await db.execute("UPDATE vector_store_files SET status = 'cancelled' WHERE "
                                 f"vector_store_id = ? AND status = 'in_progress' AND file_id IN ({members})",
                                 (store_id, batch_id))
        return await self.get_batch(owner, store_id, batch_id)

    async def touch(self, owner: str, store_ids: Sequence[str], now: int) -> None:
        marks = ", ".join("?" * len(store_ids))
        if not store_ids or not await self._all(
                f"SELECT 1 FROM vector_stores WHERE owner = ? AND id IN ({marks}) AND last_active_at < ?",
                (owner, *store_ids, now - TOUCH_EVERY)):
            return
        async with transaction(self._db) as db:
            await db.execute(
                "UPDATE vector_stores SET last_active_at = ?, expires_at = CASE WHEN expires_after_days IS "
                f"NULL THEN NULL ELSE ? + expires_after_days * 86400 END WHERE owner = ? AND id IN ({marks}) "
                "AND expired = 0", (now, now, owner, *store_ids))

    async def expire(self, now: int) -> list[str]:
        rows = await self._all("SELECT id FROM vector_stores WHERE expires_at IS NOT NULL AND expired = 0 "
                               "AND expires_at < ?", (now,))
        ids = [str(r[0]) for r in rows]
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        async with transaction(self._db) as db:
            await db.execute(f"UPDATE vector_stores SET expired = 1 WHERE id IN ({marks})", ids)
            await db.execute(f"DELETE FROM ingest_jobs WHERE vector_store_id IN ({marks})", ids)
            await db.execute("UPDATE vector_store_files SET status = 'cancelled' WHERE status = "
                             f"'in_progress' AND vector_store_id IN ({marks})", ids)
        return ids

    async def close(self) -> None:
        return None
