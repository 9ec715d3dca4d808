"""Batches in the SQLite file (the contract: :mod:`app.batches.model`): a ``batches`` row per
batch and a ``batch_lines`` row per request, in the same file as the other tables, written in
:func:`~app.stores.sqlite_db.transaction` s.  A line's result and the batch's counters change
in one transaction, so the counters never disagree with the lines after a crash.  A batch is
validated by the one worker holding its claim (``claimed_by`` until ``claim_until``): taking
it, writing its lines and moving it on are conditional writes in ``BEGIN IMMEDIATE``
transactions, so the worker processes sharing the file never validate one batch at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiosqlite
import orjson

from app.batches.model import ACTIVE, Batch, Json, Line, Result, Status, abandoned
from app.stores.sqlite_db import transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    key_digest TEXT,
    endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    doc TEXT NOT NULL,
    total INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}',
    claimed_by TEXT,
    claim_until REAL
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, seq);
CREATE INDEX IF NOT EXISTS batches_active ON batches (status);
CREATE TABLE IF NOT EXISTS batch_lines (
    batch_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    body BLOB NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    worker TEXT,
    lease_until REAL,
    not_before REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    ok INTEGER,
    result BLOB,
    PRIMARY KEY (batch_id, line)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS batch_lines_todo ON batch_lines (batch_id, state, not_before)
"""
_COLUMNS = Batch.COLUMNS



class SqliteBatchStore:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, db: aiosqlite.Connection) -> SqliteBatchStore:
        await db.executescript(_SCHEMA)
        await db.commit()
        # a store from before the validation claim: the columns are read and added under the
        # file's write lock, so worker processes opening it at once add each one once
        async with transaction(db):
            async with db.execute("PRAGMA table_info(batches)") as cur:
                columns = {row[1] for row in await cur.fetchall()}
            for name, kind in (("claimed_by", "TEXT"), ("claim_until", "REAL")):
                if name not in columns:
                    await db.execute(f"ALTER TABLE batches ADD COLUMN {name} {kind}")
        return cls(db)

    async def create(self, batch: Batch) -> None:
        async with transaction(self._db) as db:
            await db.execute(
                f"INSERT INTO batches ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (batch.id, batch.owner, batch.key_digest, batch.endpoint, batch.input_file_id,
                 batch.created_at, batch.expires_at, batch.status, batch.doc(), batch.total,
                 batch.completed, batch.failed, orjson.dumps(batch.usage)))

    async def get(self, batch_id: str, owner: str) -> Batch | None:
        async with self._db.execute(f"SELECT {_COLUMNS} FROM batches WHERE id = ? AND owner = ?",
                                    (batch_id, owner)) as cur:
            row = await cur.fetchone()
        return None if row is None else Batch.from_row(row)

    async def page(self, owner: str, *, limit: int, after: str | None) -> list[Batch] | None:
        start = 1 << 62
        if after is not None:
            async with self._db.execute("SELECT seq FROM batches WHERE id = ? AND owner = ?",
                                        (after, owner)) as cur:
                found = await cur.fetchone()
            if found is None:
                return None
            start = int(found[0])
        async with self._db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE owner = ? AND seq < ? ORDER BY seq DESC "
                "LIMIT ?", (owner, start, limit)) as cur:
            return [Batch.from_row(row) for row in await cur.fetchall()]

    async def active(self) -> list[Batch]:
        marks = ",".join("?" * len(ACTIVE))
        async with self._db.execute(f"SELECT {_COLUMNS} FROM batches WHERE status IN ({marks}) "
                                    "ORDER BY seq", ACTIVE) as cur:
            return [Batch.from_row(row) for row in await cur.fetchall()]

    async def update(self, batch: Batch, *, expect: Sequence[Status] | None = None,
                     holder: str | None = None) -> bool:
        sql = "UPDATE batches SET status = ?, doc = ?, total = ? WHERE id = ?"
        args: list[Any] = [batch.status, batch.doc(), batch.total, batch.id]
        if expect is not None:
            sql += f" AND status IN ({','.join('?' * len(expect))})"
            args += list(expect)
        if holder is not None:
            sql += " AND claimed_by = ?"
            args.append(holder)
        async with transaction(self._db) as db:
            cur = await db.execute(sql, args)
            return cur.rowcount == 1

    async def claim_batch(self, batch_id: str, worker: str, *, lease: float, now: float) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute(
                "UPDATE batches SET claimed_by = ?, claim_until = ? WHERE id = ? AND "
                "status = 'validating' AND (claimed_by IS NULL OR claimed_by = ? OR claim_until < ?)",
                (worker, now + lease, batch_id, worker, now))
            return cur.rowcount == 1

    @staticmethod
    async def _holds(db: aiosqlite.Connection, batch_id: str, worker: str) -> bool:
        async with db.execute("SELECT 1 FROM batches WHERE id = ? AND status = 'validating' AND "
                              "claimed_by = ?", (batch_id, worker)) as cur:
            return await cur.fetchone() is not None

    async def add_lines(self, batch_id: str, lines: Sequence[Line], *, worker: str) -> bool:
        async with transaction(self._db) as db:
            if not await self._holds(db, batch_id, worker):
                return False
            await db.executemany(
                "INSERT INTO batch_lines (batch_id, line, custom_id, body) VALUES (?,?,?,?)",
                [(batch_id, ln.line, ln.custom_id, ln.body) for ln in lines])
            return True

    async def clear_lines(self, batch_id: str, *, worker: str) -> bool:
        async with transaction(self._db) as db:
            if not await self._holds(db, batch_id, worker):
                return False
            await db.execute("DELETE FROM batch_lines WHERE batch_id = ?", (batch_id,))
            return True

    async def claim(self, batch_id: str, worker: str, n: int, *, lease: float,
                    now: float) -> list[Line]:
        async with transaction(self._db) as db:
            async with db.execute(
                    "SELECT line, custom_id, body, attempts FROM batch_lines WHERE batch_id = ? AND "
                    "((state = 'pending' AND not_before <= ?) OR (state = 'running' AND lease_until < ?)) "
                    "ORDER BY line LIMIT ?", (batch_id, now, now, n)) as cur:
                rows = await cur.fetchall()
            await db.executemany(
                "UPDATE batch_lines SET state = 'running', worker = ?, lease_until = ? "
                "WHERE batch_id = ? AND line = ?",
                [(worker, now + lease, batch_id, int(r[0])) for r in rows])
        return [Line(batch_id, int(r[0]), str(r[1]), bytes(r[2]), int(r[3])) for r in rows]

    async def finish(self, line: Line, worker: str, result: Result,
                     usage: Mapping[str, int]) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute(
                "UPDATE batch_lines SET state = 'done', ok = ?, result = ?, worker = NULL "
                "WHERE batch_id = ? AND line = ? AND state = 'running' AND worker = ?",
                (int(result.ok), orjson.dumps(result.output_line()), line.batch_id, line.line,
                 worker))
            if cur.rowcount != 1:
                return False
            await self._count(db, line.batch_id, result.ok, usage)
            return True

    @staticmethod
    async def _count(db: aiosqlite.Connection, batch_id: str, ok: bool,
                     usage: Mapping[str, int]) -> None:
        async with db.execute("SELECT usage FROM batches WHERE id = ?", (batch_id,)) as cur:
            row = await cur.fetchone()
        total = orjson.loads(row[0]) if row is not None else {}
        for name, value in usage.items():
            total[name] = int(total.get(name, 0)) + int(value)
        column = "completed" if ok else "failed"
        await db.execute(f"UPDATE batches SET {column} = {column} + 1, usage = ? WHERE id = ?",
                         (orjson.dumps(total), batch_id))

    async def retry(self, line: Line, worker: str, *, not_before: float) -> None:
        async with transaction(self._db) as db:
            await db.execute(
                "UPDATE batch_lines SET state = 'pending', worker = NULL, lease_until = NULL, "
                "not_before = ?, attempts = attempts + 1 WHERE batch_id = ? AND line = ? "
                "AND state = 'running' AND worker = ?", (not_before, line.batch_id, line.line, worker))

    async def renew(self, worker: str, lines: Sequence[tuple[str, int]], *, until: float) -> None:
        async with transaction(self._db) as db:
            await db.executemany(
                "UPDATE batch_lines SET lease_until = ? WHERE batch_id = ? AND line = ? "
                "AND state = 'running' AND worker = ?", [(until, b, n, worker) for b, n in lines])

    async def unfinished(self, batch_id: str) -> int:
        async with self._db.execute("SELECT count(*) FROM batch_lines WHERE batch_id = ? AND "
                                    "state != 'done'", (batch_id,)) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row is not None else 0

    async def abandon(self, batch_id: str, error: Json) -> int:
        async with transaction(self._db) as db:
            async with db.execute("SELECT line, custom_id FROM batch_lines WHERE batch_id = ? AND "
                                  "state != 'done'", (batch_id,)) as cur:
                rows = await cur.fetchall()
            done = await asyncio.to_thread(abandoned, rows, error)
            await db.executemany(
                "UPDATE batch_lines SET state = 'done', ok = 0, result = ?, worker = NULL "
                "WHERE batch_id = ? AND line = ?", [(raw, batch_id, line) for raw, line in done])
            await db.execute("UPDATE batches SET failed = failed + ? WHERE id = ?", (len(done), batch_id))
        return len(done)

    async def result_lines(self, batch_id: str, *, ok: bool) -> AsyncIterator[list[bytes]]:
        last = 0
        while True:
            async with self._db.execute(
                    "SELECT line, result FROM batch_lines WHERE batch_id = ? AND state = 'done' "
                    "AND ok = ? AND line > ? ORDER BY line LIMIT 500", (batch_id, int(ok), last)) as cur:
                rows = list(await cur.fetchall())
            if not rows:
                return
            last = int(rows[-1][0])
            yield [bytes(raw) for _, raw in rows]

    async def results(self, batch_id: str, *, ok: bool) -> AsyncIterator[Result]:
        async for page in self.result_lines(batch_id, ok=ok):
            for raw in page:
                yield Result.parse(raw)

    async def refresh(self, batch: Batch) -> Batch:
        async with self._db.execute(f"SELECT {_COLUMNS} FROM batches WHERE id = ?",
                                    (batch.id,)) as cur:
            row = await cur.fetchone()
        return batch if row is None else Batch.from_row(row)

    async def close(self) -> None:
        return None
