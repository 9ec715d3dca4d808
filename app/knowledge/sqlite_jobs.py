"""The ingestion queue of the SQLite vector-store catalog (the contract:
:class:`app.knowledge.catalog.VectorStoreCatalog`'s ``claim`` / ``renew`` / ``finish`` /
``fail`` / ``release``): a row of ``ingest_jobs`` per vector-store file in progress, claimed
under a lease by one worker, every change one ``BEGIN IMMEDIATE`` transaction.

SQLite serves the processes of one machine (``--workers N`` share the file): a claim's token
names its process, and when the catalog opens (:func:`resume_claims`), the leases of processes
that are gone (a restart) are dropped, so their jobs resume at once (a live sibling's are left
alone; a lease also runs out by itself).  A job's ``attempts`` survive, so a file that kills
its worker every time fails after :data:`~app.knowledge.catalog.MAX_ATTEMPTS`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

import aiosqlite

from app.knowledge.catalog import MAX_ATTEMPTS, ErrorCode, Job
from app.knowledge.sqlite_catalog_rows import FILE_COLUMNS, file_row, space_of
from app.knowledge.vectors import EmbeddingSpace
from app.stores.sqlite_db import transaction


def _alive(token: str) -> bool:
    """Whether the process that claimed with ``token`` still runs (SQLite: one machine)."""
    pid = token.split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return not pid.isdigit()  # this process just started: none of its old claims is live
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def resume_claims(db: aiosqlite.Connection) -> None:
    """Drop the leases of processes that are gone (a restart): their jobs resume at once."""
    async with db.execute("SELECT DISTINCT token FROM ingest_jobs WHERE token IS NOT NULL") as cur:
        held = [str(r[0]) for r in await cur.fetchall()]
    dead = [t for t in held if not _alive(t)]
    if dead:
        async with transaction(db):
            await db.executemany("UPDATE ingest_jobs SET token = NULL, lease_until = 0 WHERE token = ?",
                                 [(t,) for t in dead])


class SqliteJobs:
    """The queue's half of :class:`~app.knowledge.sqlite_catalog.SqliteCatalog` (a mixin over
    its connection ``_db``)."""

    _db: aiosqlite.Connection

    async def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        async with self._db.execute(sql, tuple(args)) as cur:
            return list(await cur.fetchall())

    async def claim(self, now: float, lease: float = 60.0) -> Job | None:
        while True:
            if not await self._all("SELECT 1 FROM ingest_jobs WHERE lease_until < ? LIMIT 1", (now,)):
                return None  # idle polls read, they never take the file's write lock
            token = f"{os.getpid()}-{uuid.uuid4().hex}"  # which process holds it (see _alive)
            async with transaction(self._db) as db:
                async with db.execute("SELECT vector_store_id, file_id, attempts FROM ingest_jobs WHERE "
                                      "lease_until < ? ORDER BY seq LIMIT 1", (now,)) as cur:
                    row = await cur.fetchone()
                if row is None:
                    return None
                sid, fid, attempts = str(row[0]), str(row[1]), int(row[2]) + 1
                await db.execute("UPDATE ingest_jobs SET token = ?, lease_until = ?, attempts = ? WHERE "
                                 "vector_store_id = ? AND file_id = ?",
                                 (token, now + lease, attempts, sid, fid))
                async with db.execute(f"SELECT {FILE_COLUMNS}, s.embedding_model, s.embedding_dimensions "
                                      "FROM vector_store_files f JOIN vector_stores s ON s.id = "
                                      "f.vector_store_id WHERE f.vector_store_id = ? AND f.file_id = ?",
                                      (sid, fid)) as cur:
                    found = await cur.fetchone()
                if found is None or attempts > MAX_ATTEMPTS:
                    await db.execute("DELETE FROM ingest_jobs WHERE vector_store_id = ? AND file_id = ?",
                                     (sid, fid))
                    await db.execute("UPDATE vector_store_files SET status = 'failed', error_code = "
                                     "'server_error', error_message = ? WHERE vector_store_id = ? AND "
                                     "file_id = ? AND status = 'in_progress'",
                                     (f"The file's processing stopped {MAX_ATTEMPTS} times; it was not "
                                      "indexed.", sid, fid))
                    continue
            record = file_row(tuple(found)[:-2])
            return Job(sid, fid, record.owner, token, attempts, record.filename, record.chunking,
                       record.attributes, space_of(found[-2], found[-1]))

    async def renew(self, job: Job, now: float, lease: float = 60.0) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("UPDATE ingest_jobs SET lease_until = ? WHERE vector_store_id = ? AND "
                                   "file_id = ? AND token = ?", (now + lease, job.vector_store_id,
                                                                 job.file_id, job.token))
            return cur.rowcount > 0

    async def _end(self, job: Job, sets: str, args: Sequence[Any], space: EmbeddingSpace | None = None,
                   ) -> bool:
        key = (job.vector_store_id, job.file_id)
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM ingest_jobs WHERE vector_store_id = ? AND file_id = ? AND "
                                   "token = ?", (*key, job.token))
            if cur.rowcount == 0:
                return False
            await db.execute(f"UPDATE vector_store_files SET {sets} WHERE vector_store_id = ? AND "
                             "file_id = ? AND status = 'in_progress'", (*args, *key))
            if space is not None:  # the first vectors of the store (or their length, now known)
                await db.execute("UPDATE vector_stores SET embedding_model = ?, embedding_dimensions = ? "
                                 "WHERE id = ? AND (embedding_model IS NULL OR (embedding_model = ? AND "
                                 "embedding_dimensions IS NULL))",
                                 (space.model, space.dimensions, job.vector_store_id, space.model))
        return True

    async def finish(self, job: Job, usage_bytes: int, space: EmbeddingSpace | None = None) -> bool:
        return await self._end(job, "status = 'completed', usage_bytes = ?", (usage_bytes,), space)

    async def fail(self, job: Job, code: ErrorCode, message: str) -> bool:
        return await self._end(job, "status = 'failed', error_code = ?, error_message = ?", (code, message))

    async def release(self, job: Job) -> None:
        async with transaction(self._db) as db:
            await db.execute("UPDATE ingest_jobs SET token = NULL, lease_until = 0, attempts = attempts - 1 "
                             "WHERE vector_store_id = ? AND file_id = ? AND token = ?",
                             (job.vector_store_id, job.file_id, job.token))
