"""Keys and usage on SQLite, in the responses' file (the contract: :mod:`app.stores.accounts`).

A usage flush is one write transaction (``BEGIN IMMEDIATE``): rows are read, added to and
written back while the file's write lock is held, so processes flushing at once add up.
"""

from __future__ import annotations

import aiosqlite
import orjson

from app.stores.accounts import USAGE_COLUMNS, Grain, Json, UsageRow, row_columns, row_from_columns
from app.stores.sqlite_db import transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS usage (
    grain TEXT NOT NULL, bucket INTEGER NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL,
    requests INTEGER NOT NULL, errors INTEGER NOT NULL, input_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    reasoning_tokens INTEGER NOT NULL, tool_rounds INTEGER NOT NULL, cost REAL NOT NULL,
    latency TEXT NOT NULL, error_codes TEXT NOT NULL,
    PRIMARY KEY (grain, bucket, key, model)
);
CREATE INDEX IF NOT EXISTS usage_key ON usage (grain, key, bucket)
"""
_SELECT = f"SELECT {', '.join(USAGE_COLUMNS)} FROM usage"
_UPSERT = (f"INSERT OR REPLACE INTO usage ({', '.join(USAGE_COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(USAGE_COLUMNS))})")


class SqliteAccountStore:
    """:class:`~app.stores.accounts.AccountStore` on a shared aiosqlite connection."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, db: aiosqlite.Connection) -> SqliteAccountStore:
        await db.executescript(_SCHEMA)
        await db.commit()
        return cls(db)

    async def put_key(self, record: Json) -> None:
        async with transaction(self._db) as db:
            async with db.execute("SELECT id FROM api_keys WHERE sha256 = ? AND id != ?",
                                  (record["sha256"], record["id"])) as cur:
                if await cur.fetchone() is not None:
                    raise ValueError("another key has this secret")
            await db.execute("INSERT OR REPLACE INTO api_keys (id, sha256, created_at, record) "
                             "VALUES (?, ?, ?, ?)", (record["id"], record["sha256"],
                                                     int(record.get("created_at", 0)),
                                                     orjson.dumps(record)))

    async def _one(self, sql: str, arg: str) -> Json | None:
        async with self._db.execute(sql, (arg,)) as cur:
            row = await cur.fetchone()
        return None if row is None else dict(orjson.loads(row[0]))

    async def get_key(self, key_id: str) -> Json | None:
        return await self._one("SELECT record FROM api_keys WHERE id = ?", key_id)

    async def key_by_hash(self, sha256: str) -> Json | None:
        return await self._one("SELECT record FROM api_keys WHERE sha256 = ?", sha256)

    async def list_keys(self) -> list[Json]:
        async with self._db.execute("SELECT record FROM api_keys ORDER BY created_at, id") as cur:
            return [dict(orjson.loads(row[0])) for row in await cur.fetchall()]

    async def add_usage(self, rows: list[UsageRow]) -> None:
        if not rows:
            return
        async with transaction(self._db) as db:
            merged = []
            for row in rows:
                async with db.execute(f"{_SELECT} WHERE grain = ? AND bucket = ? AND key = ? AND model = ?",
                                      row.ident) as cur:
                    found = await cur.fetchone()
                total = row_from_columns(found) if found is not None else row.blank()
                total.add(row)
                merged.append(row_columns(total))
            await db.executemany(_UPSERT, merged)

    async def usage(self, grain: Grain, start: int, end: int, key: str | None = None,
                    model: str | None = None) -> list[UsageRow]:
        sql = f"{_SELECT} WHERE grain = ? AND bucket >= ? AND bucket < ?"
        args: list[object] = [grain, start, end]
        if key is not None:
            sql, args = sql + " AND key = ?", [*args, key]
        if model is not None:
            sql, args = sql + " AND model = ?", [*args, model]
        async with self._db.execute(sql + " ORDER BY bucket, key, model", args) as cur:
            return [row_from_columns(r) for r in await cur.fetchall()]

    async def spent(self, key: str, since: int) -> tuple[int, float]:
        async with self._db.execute(
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost), 0) "
                "FROM usage WHERE grain = 'day' AND key = ? AND bucket >= ?", (key, since)) as cur:
            row = await cur.fetchone()
        assert row is not None
        return int(row[0]), float(row[1])

    async def expire_usage(self, grain: Grain, before: int) -> int:
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM usage WHERE grain = ? AND bucket < ?", (grain, before))
            return cur.rowcount
