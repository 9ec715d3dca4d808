"""The embedded default file store (the contract: :mod:`app.knowledge.files`): metadata in the
SQLite file beside the other tables (``files``), bytes in a directory beside that file
(``<dir of the SQLite file>/files/<id>``).

An upload is written to ``files/tmp/<random>`` (in a worker thread, one chunk at a time, so
the event loop never waits on the disk) and renamed to its final name only when it is whole;
then its row is committed.  A failed or refused upload removes its temporary file; temporary
files left by a process that died are removed when the store opens.  A delete removes the row
first, then the bytes (a reader that already opened the file finishes reading it: POSIX keeps
an unlinked file's data while it is open).  A ``:memory:`` store keeps its bytes in a
temporary directory removed at close.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

import aiosqlite

from app.knowledge.files import CHUNK, Describe, FileTooLarge, StoredFile, new_id
from app.stores.sqlite_db import transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    bytes INTEGER NOT NULL,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    content_type TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, seq);
CREATE INDEX IF NOT EXISTS files_expiry ON files (expires_at) WHERE expires_at IS NOT NULL
"""
_COLUMNS = "id, owner, created_at, bytes, filename, purpose, content_type, expires_at"


def _row(row: tuple[object, ...] | aiosqlite.Row) -> StoredFile:
    fid, owner, created, size, filename, purpose, ctype, expires = tuple(row)
    return StoredFile(str(fid), str(owner), int(created), int(size),
                      str(filename), str(purpose), str(ctype),
                      None if expires is None else int(expires))


def files_dir(store_path: str) -> Path | None:
    """Where the bytes of the store at ``store_path`` go (``None``: a ``:memory:`` store)."""
    if store_path == ":memory:" or store_path.startswith("file::memory:"):
        return None
    return Path(store_path).expanduser().parent / "files"


class LocalFileStore:
    """:class:`~app.knowledge.files.FileStore` on SQLite + a directory."""

    def __init__(self, db: aiosqlite.Connection, root: Path, *, owns_root: bool = False) -> None:
        self._db, self.root, self._owns_root = db, root, owns_root
        self._tmp = root / "tmp"

    @classmethod
    async def create(cls, db: aiosqlite.Connection, root: Path | None) -> LocalFileStore:
        """On the shared connection ``db``; ``root=None``: a temporary directory."""
        owns = root is None
        base = Path(tempfile.mkdtemp(prefix="ocm-files-")) if root is None else root
        (base / "tmp").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(base / "tmp", ignore_errors=True)  # what a dead process left half-written
        (base / "tmp").mkdir(parents=True, exist_ok=True)
        await db.executescript(_SCHEMA)
        await db.commit()
        return cls(db, base, owns_root=owns)

    def _path(self, file_id: str) -> Path:
        if not file_id.startswith("file-") or not file_id[5:].isalnum():
            raise ValueError(file_id)  # never a path of the client's choosing
        return self.root / file_id

    async def put(self, owner: str, chunks: AsyncIterator[bytes], describe: Describe, *,
                  max_bytes: int) -> StoredFile:
        file_id = new_id()
        tmp = self._tmp / uuid.uuid4().hex
        size = 0
        fh: BinaryIO = await asyncio.to_thread(open, tmp, "xb")
        try:
            try:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise FileTooLarge(max_bytes)
                    await asyncio.to_thread(fh.write, chunk)
            finally:
                await asyncio.to_thread(fh.close)
            new = describe()
            final = self._path(file_id)
            await asyncio.to_thread(os.replace, tmp, final)
            stored = StoredFile(file_id, owner, int(time.time()), size, new.filename, new.purpose,
                                new.content_type, new.expires_at)
            try:
                async with transaction(self._db) as db:
                    await db.execute(f"INSERT INTO files ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                     (file_id, owner, stored.created_at, size, new.filename,
                                      new.purpose, new.content_type, new.expires_at))
            except BaseException:
                await asyncio.to_thread(_unlink, final)
                raise
            return stored
        finally:
            await asyncio.to_thread(_unlink, tmp)

    async def get(self, file_id: str, owner: str) -> StoredFile | None:
        async with self._db.execute(f"SELECT {_COLUMNS} FROM files WHERE id = ? AND owner = ?",
                                    (file_id, owner)) as cur:
            row = await cur.fetchone()
        return None if row is None else _row(row)

    async def open(self, file_id: str, owner: str,
                   ) -> tuple[StoredFile, AsyncIterator[bytes]] | None:
        meta = await self.get(file_id, owner)
        if meta is None:
            return None
        try:
            fh: BinaryIO = await asyncio.to_thread(open, self._path(file_id), "rb")
        except FileNotFoundError:  # deleted meanwhile
            return None
        return meta, _read(fh)

    async def page(self, owner: str, *, purpose: str | None, limit: int, after: str | None,
                   ascending: bool) -> list[StoredFile] | None:
        where, args = "owner = ?", [owner]
        if purpose is not None:
            where, args = where + " AND purpose = ?", [*args, purpose]
        if after is not None:
            async with self._db.execute("SELECT seq FROM files WHERE id = ? AND owner = ?",
                                        (after, owner)) as cur:
                found = await cur.fetchone()
            if found is None:
                return None
            where += " AND seq > ?" if ascending else " AND seq < ?"
            args.append(found[0])
        order = "ASC" if ascending else "DESC"
        async with self._db.execute(f"SELECT {_COLUMNS} FROM files WHERE {where} ORDER BY seq {order} "
                                    "LIMIT ?", (*args, limit)) as cur:
            return [_row(r) for r in await cur.fetchall()]

    async def delete(self, file_id: str, owner: str) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM files WHERE id = ? AND owner = ?", (file_id, owner))
            gone = cur.rowcount > 0
        if gone:
            await asyncio.to_thread(_unlink, self._path(file_id))
        return gone

    async def sweep(self, expired_before: int) -> int:
        async with self._db.execute("SELECT id FROM files WHERE expires_at IS NOT NULL AND "
                                    "expires_at < ?", (expired_before,)) as cur:
            ids = [str(r[0]) for r in await cur.fetchall()]
        if not ids:
            return 0
        async with transaction(self._db) as db:
            await db.executemany("DELETE FROM files WHERE id = ?", [(i,) for i in ids])
        for file_id in ids:
            await asyncio.to_thread(_unlink, self._path(file_id))
        return len(ids)

    async def close(self) -> None:
        if self._owns_root:
            await asyncio.to_thread(shutil.rmtree, self.root, True)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


async def _read(fh: BinaryIO) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(fh.read, CHUNK):
            yield chunk
    finally:
        fh.close()
