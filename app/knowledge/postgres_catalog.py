"""The vector-store catalog on PostgreSQL (the contract: :mod:`app.knowledge.catalog`), for N
replicas sharing one database: the tables of step 7 of :data:`app.stores.postgres_schema.MIGRATIONS`
(``vector_stores``, ``vector_store_files``, ``vector_store_batches``,
``vector_store_batch_files``, ``ingest_jobs``), the same as SQLite's.

* **Claims** take the oldest job whose lease is over with ``FOR UPDATE SKIP LOCKED``: two
  replicas claiming at once get different jobs, and a replica that died leaves its job to the
  first claim after its lease (renewed by a live worker every third of it) runs out.
* **Adding files** locks the store's row (``FOR KEY SHARE``) and a delete takes it
  exclusively, so a file added while its store is deleted either lands first (and goes with
  it) or finds no store; a file added twice at once ends as one row with one job.
* **Expiry** runs on one replica at a time (an advisory lock, like the files' sweep).
* Failures of the server are 503 ``store_unavailable`` (:func:`app.stores.postgres.guard`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import orjson

from app.knowledge.catalog import (
    MAX_ATTEMPTS,
    TOUCH_EVERY,
    BatchRecord,
    ErrorCode,
    FileCounts,
    FileRecord,
    Job,
    NewEntry,
    NewStore,
    Page,
    StoreChanges,
    StoreRecord,
    chunking_json,
    chunking_of,
)
from app.knowledge.sqlite_catalog_rows import space_of
from app.knowledge.vectors import Attributes, EmbeddingSpace, new_store_id
from app.stores.postgres import guard

_EXPIRY_LOCK = 0x6F636D + 37  # one replica at a time expires vector stores
_STORE = ("id, owner, created_at, name, metadata, expires_after_days, expires_at, last_active_at, "
          "expired, embedding_model, embedding_dimensions")
_FILE = ("f.vector_store_id, f.file_id, f.owner, f.created_at, f.status, f.usage_bytes, f.error_code, "
         "f.error_message, f.attributes, f.chunking, f.filename")


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _file(row: asyncpg.Record) -> FileRecord:
    code = row["error_code"]
    return FileRecord(row["vector_store_id"], row["file_id"], row["owner"], int(row["created_at"]),
                      row["status"], int(row["usage_bytes"]),
                      None if code is None else (code, row["error_message"] or ""),
                      orjson.loads(row["attributes"]), chunking_of(orjson.loads(row["chunking"])),
                      row["filename"])


class PostgresCatalog:
    """:class:`~app.knowledge.catalog.VectorStoreCatalog` on an asyncpg pool (migrated)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _stores(self, conn: Any, rows: Sequence[asyncpg.Record]) -> list[StoreRecord]:
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        found = await conn.fetch(
            "SELECT vector_store_id, status, count(*) AS n, sum(CASE WHEN status = 'completed' THEN "
            "usage_bytes ELSE 0 END) AS used FROM vector_store_files WHERE vector_store_id = ANY($1::text[]) "
            "GROUP BY vector_store_id, status", ids)
        counts: dict[str, dict[str, int]] = {}
        usage: dict[str, int] = {}
        for r in found:
            counts.setdefault(r["vector_store_id"], {})[r["status"]] = int(r["n"])
            usage[r["vector_store_id"]] = usage.get(r["vector_store_id"], 0) + int(r["used"] or 0)
        return [StoreRecord(r["id"], r["owner"], int(r["created_at"]), r["name"],
                            None if r["metadata"] is None else orjson.loads(r["metadata"]),
                            r["expires_after_days"], r["expires_at"], int(r["last_active_at"]),
                            bool(r["expired"]), FileCounts.of(counts.get(r["id"], {})),
                            usage.get(r["id"], 0), space_of(r["embedding_model"], r["embedding_dimensions"]))
                for r in rows]

    async def create_store(self, store: NewStore, entries: Sequence[NewEntry], now: int) -> StoreRecord:
        sid = new_store_id()
        expires = None if store.expires_after_days is None else now + store.expires_after_days * 86400
        space = store.space
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO vector_stores ({_STORE}, description) VALUES "
                "($1, $2, $3, $4, $5, $6, $7, $8, FALSE, $9, $10, $11)",
                sid, store.owner, now, store.name, None if store.metadata is None else _json(store.metadata),
                store.expires_after_days, expires, now, None if space is None else space.model,
                None if space is None else space.dimensions, store.description)
            await self._insert_files(conn, store.owner, sid, entries, now, None)
        found = await self.get_store(store.owner, sid)
        assert found is not None
        return found

    async def get_store(self, owner: str, store_id: str) -> StoreRecord | None:
        async with guard(), self._pool.acquire() as conn:
            rows = await conn.fetch(f"SELECT {_STORE} FROM vector_stores WHERE id = $1 AND owner = $2",
                                    store_id, owner)
            found = await self._stores(conn, rows)
        return found[0] if found else None

    async def _seq(self, conn: Any, table: str, key: str, where: str, args: Sequence[Any],
                   page: Page) -> tuple[int | None, bool, str] | None:
        cursor, forward = (page.before, False) if page.after is None and page.before else (page.after, True)
        ascending = page.ascending == forward
        if cursor is None:
            return None, ascending, "ASC" if ascending else "DESC"
        seq = await conn.fetchval(f"SELECT seq FROM {table} WHERE {where} AND {key} = ${len(args) + 1}",
                                  *args, cursor)
        if seq is None:
            return None
        return int(seq), ascending, "ASC" if ascending else "DESC"

    async def page_stores(self, owner: str, page: Page) -> list[StoreRecord] | None:
        async with guard(), self._pool.acquire() as conn:
            found = await self._seq(conn, "vector_stores", "id", "owner = $1", [owner], page)
            if found is None:
                return None
            seq, ascending, order = found
            rows = await conn.fetch(
                f"SELECT {_STORE} FROM vector_stores WHERE owner = $1 AND ($2::bigint IS NULL OR "
                f"seq {'>' if ascending else '<'} $2) ORDER BY seq {order} LIMIT $3", owner, seq, page.limit)
            records = await self._stores(conn, rows)
        if page.before is not None and page.after is None:
            records.reverse()
        return records

    async def update_store(self, owner: str, store_id: str, changes: StoreChanges,
                           now: int) -> StoreRecord | None:
        async with guard(), self._pool.acquire() as conn:
            if changes.set_name:
                await conn.execute("UPDATE vector_stores SET name = $3 WHERE id = $1 AND owner = $2",
                                   store_id, owner, changes.name or "")
            if changes.set_metadata:
                await conn.execute("UPDATE vector_stores SET metadata = $3 WHERE id = $1 AND owner = $2",
                                   store_id, owner,
                                   None if changes.metadata is None else _json(changes.metadata))
            if changes.set_expiry:
                await conn.execute(
                    "UPDATE vector_stores SET expires_after_days = $3::int, expires_at = CASE WHEN "
                    "$3::int IS NULL THEN NULL ELSE last_active_at + $3::int * 86400 END WHERE id = $1 AND "
                    "owner = $2",
                    store_id, owner, changes.expires_after_days)
        return await self.get_store(owner, store_id)

    async def delete_store(self, owner: str, store_id: str) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            gone = await conn.fetchval("DELETE FROM vector_stores WHERE id = $1 AND owner = $2 RETURNING id",
                                       store_id, owner)
            if gone is None:
                return False
            for table in ("vector_store_files", "vector_store_batch_files", "ingest_jobs",
                          "vector_store_batches"):
                await conn.execute(f"DELETE FROM {table} WHERE vector_store_id = $1", store_id)
        return True

    async def _insert_files(self, conn: Any, owner: str, store_id: str, entries: Sequence[NewEntry],
                            now: int, batch_id: str | None) -> None:
        for e in entries:
            await conn.execute("DELETE FROM vector_store_files WHERE vector_store_id = $1 AND file_id = $2",
                               store_id, e.file_id)
            await conn.execute(
                "INSERT INTO vector_store_files (vector_store_id, file_id, owner, created_at, status, "
                "attributes, chunking, filename) VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, $7) "
                "ON CONFLICT (vector_store_id, file_id) DO UPDATE SET status = 'in_progress', "
                "usage_bytes = 0, error_code = NULL, error_message = NULL, attributes = excluded.attributes, "
                "chunking = excluded.chunking, created_at = excluded.created_at",
                store_id, e.file_id, owner, now, _json(dict(e.attributes)), _json(chunking_json(e.chunking)),
                e.filename)
            await conn.execute(
                "INSERT INTO ingest_jobs (vector_store_id, file_id) VALUES ($1, $2) ON CONFLICT "
                "(vector_store_id, file_id) DO UPDATE SET token = NULL, lease_until = 0, attempts = 0",
                store_id, e.file_id)
            if batch_id is not None:
                await conn.execute("INSERT INTO vector_store_batch_files VALUES ($1, $2, $3) ON CONFLICT "
                                   "DO NOTHING", batch_id, store_id, e.file_id)

    async def add_files(self, owner: str, store_id: str, entries: Sequence[NewEntry], now: int,
                        batch_id: str | None = None) -> list[FileRecord] | None:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchval("SELECT 1 FROM vector_stores WHERE id = $1 AND owner = $2 FOR KEY SHARE",
                                   store_id, owner) is None:
                return None
            if batch_id is not None:
                await conn.execute("INSERT INTO vector_store_batches VALUES ($1, $2, $3, $4, FALSE)",
                                   batch_id, store_id, owner, now)
            await self._insert_files(conn, owner, store_id, entries, now, batch_id)
        found = [await self.get_file(owner, store_id, e.file_id) for e in entries]
        return [f for f in found if f is not None]

    async def get_file(self, owner: str, store_id: str, file_id: str) -> FileRecord | None:
        async with guard():
            row = await self._pool.fetchrow(f"SELECT {_FILE} FROM vector_store_files f WHERE "
                                            "f.vector_store_id = $1 AND f.file_id = $2 AND f.owner = $3",
                                            store_id, file_id, owner)
        return None if row is None else _file(row)

    async def page_files(self, owner: str, store_id: str, page: Page, *, status: str | None = None,
                         batch_id: str | None = None) -> list[FileRecord] | None:
        async with guard(), self._pool.acquire() as conn:
            found = await self._seq(conn, "vector_store_files", "file_id",
                                    "vector_store_id = $1 AND owner = $2", [store_id, owner], page)
            if found is None:
                return None
            seq, ascending, order = found
            rows = await conn.fetch(
                f"SELECT {_FILE} FROM vector_store_files f WHERE f.vector_store_id = $1 AND f.owner = $2 "
                f"AND ($3::bigint IS NULL OR f.seq {'>' if ascending else '<'} $3) AND ($4::text IS NULL OR "
                "f.status = $4) AND ($5::text IS NULL OR EXISTS (SELECT 1 FROM vector_store_batch_files b "
                "WHERE b.batch_id = $5 AND b.vector_store_id = f.vector_store_id AND b.file_id = f.file_id)) "
                f"ORDER BY f.seq {order} LIMIT $6", store_id, owner, seq, status, batch_id, page.limit)
        records = [_file(r) for r in rows]
        if page.before is not None and page.after is None:
            records.reverse()
        return records

    async def set_attributes(self, owner: str, store_id: str, file_id: str,
                             attributes: Attributes) -> FileRecord | None:
        async with guard():
            await self._pool.execute("UPDATE vector_store_files SET attributes = $4 WHERE vector_store_id = "
                                     "$1 AND file_id = $2 AND owner = $3", store_id, file_id, owner,
                                     _json(dict(attributes)))
        return await self.get_file(owner, store_id, file_id)

    async def remove_file(self, owner: str, store_id: str, file_id: str) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            gone = await conn.fetchval("DELETE FROM vector_store_files WHERE vector_store_id = $1 AND "
                                       "file_id = $2 AND owner = $3 RETURNING 1", store_id, file_id, owner)
            if gone is None:
                return False
            await conn.execute("DELETE FROM ingest_jobs WHERE vector_store_id = $1 AND file_id = $2",
                               store_id, file_id)
        return True

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord | None:
        async with guard(), self._pool.acquire() as conn:
            row = await conn.fetchrow("SELECT id, vector_store_id, owner, created_at, cancelled FROM "
                                      "vector_store_batches WHERE id = $1 AND vector_store_id = $2 AND "
                                      "owner = $3", batch_id, store_id, owner)
            if row is None:
                return None
            counts = await conn.fetch(
                "SELECT f.status, count(*) AS n FROM vector_store_batch_files b JOIN vector_store_files f ON "
                "f.vector_store_id = b.vector_store_id AND f.file_id = b.file_id WHERE b.batch_id = $1 "
                "GROUP BY f.status", batch_id)
        return BatchRecord(row["id"], row["vector_store_id"], row["owner"], int(row["created_at"]),
                           bool(row["cancelled"]), FileCounts.of({r["status"]: int(r["n"]) for r in counts}))

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord | None:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            done = await conn.fetchval("UPDATE vector_store_batches SET cancelled = TRUE WHERE id = $1 AND "
                                       "vector_store_id = $2 AND owner = $3 RETURNING 1",
                                       batch_id, store_id, owner)
            if done is not None:
                files = await conn.fetch(
                    "UPDATE vector_store_files SET status = 'cancelled' WHERE vector_store_id = $1 AND "
                    "status = 'in_progress' AND file_id IN (SELECT file_id FROM vector_store_batch_files "
                    "WHERE batch_id = $2) RETURNING file_id", store_id, batch_id)
                await conn.execute("DELETE FROM ingest_jobs WHERE vector_store_id = $1 AND file_id = ANY($2)",
                                   store_id, [r["file_id"] for r in files])
        return await self.get_batch(owner, store_id, batch_id)

    async def touch(self, owner: str, store_ids: Sequence[str], now: int) -> None:
        if not store_ids:
            return
        async with guard():
            await self._pool.execute(
                "UPDATE vector_stores SET last_active_at = $3::bigint, expires_at = CASE WHEN "
                "expires_after_days IS NULL THEN NULL ELSE $3::bigint + expires_after_days * 86400 END "
                "WHERE owner = $1 AND id = ANY($2::text[]) AND NOT expired AND last_active_at < $4",
                owner, list(store_ids), now, now - TOUCH_EVERY)

    async def expire(self, now: int) -> list[str]:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _EXPIRY_LOCK):
                return []
            rows = await conn.fetch("UPDATE vector_stores SET expired = TRUE WHERE expires_at IS NOT NULL "
                                    "AND NOT expired AND expires_at < $1 RETURNING id", now)
            ids = [r["id"] for r in rows]
            if ids:
                await conn.execute("DELETE FROM ingest_jobs WHERE vector_store_id = ANY($1::text[])", ids)
                await conn.execute("UPDATE vector_store_files SET status = 'cancelled' WHERE status = "
                                   "'in_progress' AND vector_store_id = ANY($1::text[])", ids)
        return ids

    async def claim(self, now: float, lease: float = 60.0) -> Job | None:
        while True:
            token = uuid.uuid4().hex
            async with guard(), self._pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    "WITH picked AS (SELECT vector_store_id, file_id FROM ingest_jobs WHERE lease_until < $1 "
                    "ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) UPDATE ingest_jobs j SET token = $2, "
                    "lease_until = $3, attempts = j.attempts + 1 FROM picked WHERE j.vector_store_id = "
                    "picked.vector_store_id AND j.file_id = picked.file_id RETURNING j.vector_store_id, "
                    "j.file_id, j.attempts", now, token, now + lease)
                if row is None:
                    return None
                sid, fid, attempts = row["vector_store_id"], row["file_id"], int(row["attempts"])
                found = await conn.fetchrow(
                    f"SELECT {_FILE}, s.embedding_model, s.embedding_dimensions FROM vector_store_files f "
                    "JOIN vector_stores s ON s.id = f.vector_store_id WHERE f.vector_store_id = $1 AND "
                    "f.file_id = $2", sid, fid)
                if found is None or attempts > MAX_ATTEMPTS:
                    await conn.execute("DELETE FROM ingest_jobs WHERE vector_store_id = $1 AND file_id = $2",
                                       sid, fid)
                    await conn.execute(
                        "UPDATE vector_store_files SET status = 'failed', error_code = 'server_error', "
                        "error_message = $3 WHERE vector_store_id = $1 AND file_id = $2 AND status = "
                        "'in_progress'", sid, fid,
                        f"The file's processing stopped {MAX_ATTEMPTS} times; it was not indexed.")
                    continue
            record = _file(found)
            return Job(sid, fid, record.owner, token, attempts, record.filename, record.chunking,
                       record.attributes, space_of(found["embedding_model"], found["embedding_dimensions"]))

    async def renew(self, job: Job, now: float, lease: float = 60.0) -> bool:
        async with guard():
            done = await self._pool.fetchval(
                "UPDATE ingest_jobs SET lease_until = $4 WHERE vector_store_id = $1 AND file_id = $2 AND "
                "token = $3 RETURNING 1", job.vector_store_id, job.file_id, job.token, now + lease)
        return done is not None

    async def _end(self, job: Job, sets: str, args: Sequence[Any], space: EmbeddingSpace | None = None,
                   ) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            gone = await conn.fetchval("DELETE FROM ingest_jobs WHERE vector_store_id = $1 AND file_id = $2 "
                                       "AND token = $3 RETURNING 1", job.vector_store_id, job.file_id,
                                       job.token)
            if gone is None:
                return False
            await conn.execute(f"UPDATE vector_store_files SET {sets} WHERE vector_store_id = $1 AND "
                               "file_id = $2 AND status = 'in_progress'", job.vector_store_id, job.file_id,
                               *args)
            if space is not None:
                await conn.execute(
                    "UPDATE vector_stores SET embedding_model = $2, embedding_dimensions = $3 WHERE id = $1 "
                    "AND (embedding_model IS NULL OR (embedding_model = $2 AND embedding_dimensions IS "
                    "NULL))",
                    job.vector_store_id, space.model, space.dimensions)
        return True

    async def finish(self, job: Job, usage_bytes: int, space: EmbeddingSpace | None = None) -> bool:
        return await self._end(job, "status = 'completed', usage_bytes = $3", (usage_bytes,), space)

    async def fail(self, job: Job, code: ErrorCode, message: str) -> bool:
        return await self._end(job, "status = 'failed', error_code = $3, error_message = $4", (code, message))

    async def release(self, job: Job) -> None:
        async with guard():
            await self._pool.execute(
                "UPDATE ingest_jobs SET token = NULL, lease_until = 0, attempts = attempts - 1 WHERE "
                "vector_store_id = $1 AND file_id = $2 AND token = $3", job.vector_store_id, job.file_id,
                job.token)

    async def close(self) -> None:
        return None
