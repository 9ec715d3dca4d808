"""The file store on PostgreSQL (the contract: :mod:`app.knowledge.files`), for N replicas:
metadata in ``files``, bytes in ``file_chunks`` rows of :data:`~app.knowledge.files.CHUNK`
bytes (``bytea`` stored uncompressed: uploads are mostly compressed already), both created by
step 5 of :data:`app.stores.postgres_schema.MIGRATIONS`.

An upload's chunks and its ``files`` row are written in one transaction, so a failed, refused
or interrupted upload leaves nothing (no sweep of half-written files is needed); the upload
holds one pooled connection while its body arrives.  Reading takes a pooled connection per
chunk (never for the whole download, which a slow client may stretch); a file deleted while
it is being read ends early.  Failures of the server are 503 ``store_unavailable``
(:func:`app.stores.postgres.guard`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg

from app.knowledge.files import CHUNK, Describe, FileTooLarge, StoredFile, new_id
from app.stores.postgres import guard

_COLUMNS = "id, owner, created_at, bytes, filename, purpose, content_type, expires_at"
_SWEEP_LOCK = 0x6F636D + 10  # one replica at a time sweeps expired files


def _row(row: asyncpg.Record) -> StoredFile:
    return StoredFile(row["id"], row["owner"], int(row["created_at"]), int(row["bytes"]), row["filename"],
                      row["purpose"], row["content_type"],
                      None if row["expires_at"] is None else int(row["expires_at"]))


class PostgresFileStore:
    """:class:`~app.knowledge.files.FileStore` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool, *, owns_pool: bool = False) -> None:
        self._pool, self._owns = pool, owns_pool

    async def put(self, owner: str, chunks: AsyncIterator[bytes], describe: Describe, *,
                  max_bytes: int) -> StoredFile:
        file_id, size, n = new_id(), 0, 0
        pending: list[bytes] = []
        held = 0
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            insert = "INSERT INTO file_chunks (file_id, n, data) VALUES ($1, $2, $3)"
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise FileTooLarge(max_bytes)
                pending.append(chunk)
                held += len(chunk)
                if held >= CHUNK:
                    data = b"".join(pending)
                    for start in range(0, len(data) - CHUNK + 1, CHUNK):
                        await conn.execute(insert, file_id, n, data[start:start + CHUNK])
                        n += 1
                    rest = data[(len(data) // CHUNK) * CHUNK:]
                    pending, held = ([rest], len(rest)) if rest else ([], 0)
            if held:
                await conn.execute(insert, file_id, n, b"".join(pending))
            new = describe()
            stored = StoredFile(file_id, owner, int(time.time()), size, new.filename, new.purpose,
                                new.content_type, new.expires_at)
            await conn.execute(f"INSERT INTO files ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                               file_id, owner, stored.created_at, size, new.filename, new.purpose,
                               new.content_type, new.expires_at)
        return stored

    async def get(self, file_id: str, owner: str) -> StoredFile | None:
        async with guard():
            row = await self._pool.fetchrow(f"SELECT {_COLUMNS} FROM files WHERE id = $1 AND owner = $2",
                                            file_id, owner)
        return None if row is None else _row(row)

    async def open(self, file_id: str, owner: str,
                   ) -> tuple[StoredFile, AsyncIterator[bytes]] | None:
        meta = await self.get(file_id, owner)
        return None if meta is None else (meta, self._read(file_id))

    async def _read(self, file_id: str) -> AsyncIterator[bytes]:
        n = 0
        while True:
            async with guard():
                data = await self._pool.fetchval("SELECT data FROM file_chunks WHERE file_id = $1 "
                                                 "AND n = $2", file_id, n)
            if data is None:
                return
            yield bytes(data)
            n += 1

    async def page(self, owner: str, *, purpose: str | None, limit: int, after: str | None,
                   ascending: bool) -> list[StoredFile] | None:
        async with guard():
            seq = None
            if after is not None:
                seq = await self._pool.fetchval("SELECT seq FROM files WHERE id = $1 AND owner = $2",
                                                after, owner)
                if seq is None:
                    return None
            order, cmp = ("ASC", ">") if ascending else ("DESC", "<")
            rows = await self._pool.fetch(
                f"SELECT {_COLUMNS} FROM files WHERE owner = $1 AND ($2::text IS NULL OR purpose = $2) "
                f"AND ($3::bigint IS NULL OR seq {cmp} $3) ORDER BY seq {order} LIMIT $4",
                owner, purpose, seq, limit)
        return [_row(r) for r in rows]

    async def delete(self, file_id: str, owner: str) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            gone = await conn.fetchval("DELETE FROM files WHERE id = $1 AND owner = $2 RETURNING id",
                                       file_id, owner)
            if gone is not None:
                await conn.execute("DELETE FROM file_chunks WHERE file_id = $1", file_id)
        return gone is not None

    async def sweep(self, expired_before: int) -> int:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _SWEEP_LOCK):
                return 0
            ids = await conn.fetch("DELETE FROM files WHERE expires_at IS NOT NULL AND expires_at < $1 "
                                   "RETURNING id", expired_before)
            if ids:
                await conn.execute("DELETE FROM file_chunks WHERE file_id = ANY($1::text[])",
                                   [r["id"] for r in ids])
        return len(ids)

    async def close(self) -> None:
        if self._owns:
            await self._pool.close()
