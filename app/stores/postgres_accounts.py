"""Keys and usage on PostgreSQL (the contract: :mod:`app.stores.accounts`; the tables are
migration step 2 of :mod:`app.stores.postgres`).

A usage flush is one transaction: missing rows are inserted as zeros (``ON CONFLICT DO
NOTHING``), the batch's rows are locked ``FOR UPDATE`` in a fixed order (replicas flushing at
once wait for each other instead of deadlocking), added to and written back.
"""

from __future__ import annotations

import asyncpg
import orjson

from app.stores.accounts import USAGE_COLUMNS, Grain, Json, UsageRow, row_columns, row_from_columns
from app.stores.postgres import guard

_COLUMNS = ", ".join(USAGE_COLUMNS)
_PLACEHOLDERS = ", ".join(f"${i}" for i in range(1, len(USAGE_COLUMNS) + 1))
_SETS = ", ".join(f"{c} = excluded.{c}" for c in USAGE_COLUMNS[4:])


class PostgresAccountStore:
    """:class:`~app.stores.accounts.AccountStore` on an asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def put_key(self, record: Json) -> None:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            other = await conn.fetchval("SELECT id FROM api_keys WHERE sha256 = $1 AND id != $2",
                                        record["sha256"], record["id"])
            if other is not None:
                raise ValueError("another key has this secret")
            await conn.execute(
                "INSERT INTO api_keys (id, sha256, created_at, record) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (id) DO UPDATE SET sha256 = excluded.sha256, record = excluded.record",
                record["id"], record["sha256"], int(record.get("created_at", 0)), orjson.dumps(record))

    async def _one(self, sql: str, arg: str) -> Json | None:
        async with guard():
            blob = await self._pool.fetchval(sql, arg)
        return None if blob is None else dict(orjson.loads(blob))

    async def get_key(self, key_id: str) -> Json | None:
        return await self._one("SELECT record FROM api_keys WHERE id = $1", key_id)

    async def key_by_hash(self, sha256: str) -> Json | None:
        return await self._one("SELECT record FROM api_keys WHERE sha256 = $1", sha256)

    async def list_keys(self) -> list[Json]:
        async with guard():
            rows = await self._pool.fetch("SELECT record FROM api_keys ORDER BY created_at, id")
        return [dict(orjson.loads(row[0])) for row in rows]

    async def add_usage(self, rows: list[UsageRow]) -> None:
        if not rows:
            return
        rows = sorted(rows, key=lambda r: r.ident)
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.executemany(
                f"INSERT INTO usage ({_COLUMNS}) VALUES ({_PLACEHOLDERS}) ON CONFLICT DO NOTHING",
                [row_columns(row.blank()) for row in rows])
            merged = []
            for row in rows:
                found = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM usage WHERE grain = $1 AND bucket = $2 AND key = $3 "
                    "AND model = $4 FOR UPDATE", *row.ident)
                assert found is not None  # inserted above, locked now
                total = row_from_columns(tuple(found))
                total.add(row)
                merged.append(row_columns(total))
            await conn.executemany(
                f"INSERT INTO usage ({_COLUMNS}) VALUES ({_PLACEHOLDERS}) "
                f"ON CONFLICT (grain, bucket, key, model) DO UPDATE SET {_SETS}", merged)

    async def usage(self, grain: Grain, start: int, end: int, key: str | None = None,
                    model: str | None = None) -> list[UsageRow]:
        sql = f"SELECT {_COLUMNS} FROM usage WHERE grain = $1 AND bucket >= $2 AND bucket < $3"
        args: list[object] = [grain, start, end]
        for column, value in (("key", key), ("model", model)):
            if value is not None:
                args.append(value)
                sql += f" AND {column} = ${len(args)}"
        async with guard():
            found = await self._pool.fetch(sql + " ORDER BY bucket, key, model", *args)
        return [row_from_columns(tuple(r)) for r in found]

    async def spent(self, key: str, since: int) -> tuple[int, float]:
        async with guard():
            row = await self._pool.fetchrow(
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost), 0) "
                "FROM usage WHERE grain = 'day' AND key = $1 AND bucket >= $2", key, since)
        assert row is not None
        return int(row[0]), float(row[1])

    async def expire_usage(self, grain: Grain, before: int) -> int:
        async with guard():
            status = await self._pool.execute("DELETE FROM usage WHERE grain = $1 AND bucket < $2",
                                              grain, before)
        return int(status.rsplit(" ", 1)[-1] or 0)
