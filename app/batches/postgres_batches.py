"""Batches on PostgreSQL (the contract: :mod:`app.batches.model`), for N replicas: the tables
of step 6 of :data:`app.stores.postgres_schema.MIGRATIONS`.  Every replica's worker
polls the same batches; lines are claimed with ``FOR UPDATE SKIP LOCKED`` under a lease, so
each line is run by one replica at a time, and a replica that dies stops renewing its leases
and its lines go to the next claimer.  A line's result and the batch's counters are written in
one transaction.  A batch is validated by the one replica holding its claim (``claimed_by``
until ``claim_until``, step 9): taken by a conditional ``UPDATE``, and every write of its
lines checks the claim under the batch row's lock (``FOR UPDATE``), so a replica whose claim
was taken over (its lease ran out) can no longer add or delete lines.  Failures of the server
are 503 ``store_unavailable`` (``guard``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

import asyncpg
import orjson

from app.batches.model import ACTIVE, Batch, Json, Line, Result, Status, abandoned
from app.stores.postgres import guard

_COLUMNS = Batch.COLUMNS



class PostgresBatchStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(self, batch: Batch) -> None:
        async with guard():
            await self._pool.execute(
                f"INSERT INTO batches ({_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)",
                batch.id, batch.owner, batch.key_digest, batch.endpoint, batch.input_file_id,
                batch.created_at, batch.expires_at, batch.status, batch.doc(), batch.total,
                batch.completed, batch.failed, orjson.dumps(batch.usage).decode())

    async def get(self, batch_id: str, owner: str) -> Batch | None:
        async with guard():
            row = await self._pool.fetchrow(f"SELECT {_COLUMNS} FROM batches WHERE id = $1 AND owner = $2",
                                            batch_id, owner)
        return None if row is None else Batch.from_row(row)

    async def page(self, owner: str, *, limit: int, after: str | None) -> list[Batch] | None:
        async with guard():
            start = 1 << 62
            if after is not None:
                found = await self._pool.fetchval("SELECT seq FROM batches WHERE id = $1 AND owner = $2",
                                                  after, owner)
                if found is None:
                    return None
                start = int(found)
            rows = await self._pool.fetch(f"SELECT {_COLUMNS} FROM batches WHERE owner = $1 AND "
                                          "seq < $2 ORDER BY seq DESC LIMIT $3", owner, start, limit)
        return [Batch.from_row(row) for row in rows]

    async def active(self) -> list[Batch]:
        async with guard():
            rows = await self._pool.fetch(f"SELECT {_COLUMNS} FROM batches WHERE status = ANY($1) "
                                          "ORDER BY seq", list(ACTIVE))
        return [Batch.from_row(row) for row in rows]

    async def update(self, batch: Batch, *, expect: Sequence[Status] | None = None,
                     holder: str | None = None) -> bool:
        async with guard():
            done = await self._pool.execute(
                "UPDATE batches SET status = $1, doc = $2, total = $3 WHERE id = $4 "
                "AND ($5::text[] IS NULL OR status = ANY($5)) AND ($6::text IS NULL OR claimed_by = $6)",
                batch.status, batch.doc(), batch.total, batch.id,
                None if expect is None else list(expect), holder)
        return bool(done.endswith(" 1"))

    async def claim_batch(self, batch_id: str, worker: str, *, lease: float, now: float) -> bool:
        async with guard():
            done = await self._pool.execute(
                "UPDATE batches SET claimed_by = $2, claim_until = $3 WHERE id = $1 AND "
                "status = 'validating' AND (claimed_by IS NULL OR claimed_by = $2 OR claim_until < $4)",
                batch_id, worker, now + lease, now)
        return bool(done.endswith(" 1"))

    @staticmethod
    async def _holds(conn: asyncpg.pool.PoolConnectionProxy, batch_id: str, worker: str) -> bool:
        """Whether ``worker`` holds the batch's claim; the row stays locked to the transaction's
        end, so the claim cannot be taken over meanwhile."""
        found = await conn.fetchval("SELECT 1 FROM batches WHERE id = $1 AND status = 'validating' "
                                    "AND claimed_by = $2 FOR UPDATE", batch_id, worker)
        return found is not None

    async def add_lines(self, batch_id: str, lines: Sequence[Line], *, worker: str) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            if not await self._holds(conn, batch_id, worker):
                return False
            await conn.executemany(
                "INSERT INTO batch_lines (batch_id, line, custom_id, body) VALUES ($1, $2, $3, $4)",
                [(batch_id, ln.line, ln.custom_id, ln.body) for ln in lines])
            return True

    async def clear_lines(self, batch_id: str, *, worker: str) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            if not await self._holds(conn, batch_id, worker):
                return False
            await conn.execute("DELETE FROM batch_lines WHERE batch_id = $1", batch_id)
            return True

    async def claim(self, batch_id: str, worker: str, n: int, *, lease: float,
                    now: float) -> list[Line]:
        async with guard():
            rows = await self._pool.fetch(
                "UPDATE batch_lines SET state = 'running', worker = $3, lease_until = $4 "
                "WHERE (batch_id, line) IN (SELECT batch_id, line FROM batch_lines WHERE batch_id = $1 "
                "AND ((state = 'pending' AND not_before <= $2) OR (state = 'running' AND lease_until < $2)) "
                "ORDER BY line LIMIT $5 FOR UPDATE SKIP LOCKED) RETURNING line, custom_id, body, attempts",
                batch_id, now, worker, now + lease, n)
        return sorted((Line(batch_id, int(r["line"]), r["custom_id"], bytes(r["body"]), int(r["attempts"]))
                       for r in rows), key=lambda ln: ln.line)

    async def finish(self, line: Line, worker: str, result: Result,
                     usage: Mapping[str, int]) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            done = await conn.execute(
                "UPDATE batch_lines SET state = 'done', ok = $1, result = $2, worker = NULL "
                "WHERE batch_id = $3 AND line = $4 AND state = 'running' AND worker = $5",
                result.ok, orjson.dumps(result.output_line()), line.batch_id, line.line, worker)
            if not done.endswith(" 1"):
                return False
            column = "completed" if result.ok else "failed"
            await conn.execute(
                f"UPDATE batches SET {column} = {column} + 1, usage = coalesce((SELECT jsonb_object_agg("
                "k, coalesce((usage::jsonb ->> k)::bigint, 0) + coalesce(($2::jsonb ->> k)::bigint, 0)) "
                "FROM jsonb_object_keys(usage::jsonb || $2::jsonb) AS k), '{}'::jsonb)::text WHERE id = $1",
                line.batch_id, orjson.dumps(dict(usage)).decode())
            return True

    async def retry(self, line: Line, worker: str, *, not_before: float) -> None:
        async with guard():
            await self._pool.execute(
                "UPDATE batch_lines SET state = 'pending', worker = NULL, lease_until = NULL, "
                "not_before = $1, attempts = attempts + 1 WHERE batch_id = $2 AND line = $3 "
                "AND state = 'running' AND worker = $4", not_before, line.batch_id, line.line, worker)

    async def renew(self, worker: str, lines: Sequence[tuple[str, int]], *, until: float) -> None:
        async with guard():
            await self._pool.executemany(
                "UPDATE batch_lines SET lease_until = $1 WHERE batch_id = $2 AND line = $3 "
                "AND state = 'running' AND worker = $4", [(until, b, n, worker) for b, n in lines])

    async def unfinished(self, batch_id: str) -> int:
        async with guard():
            found = await self._pool.fetchval("SELECT count(*) FROM batch_lines WHERE batch_id = $1 "
                                              "AND state != 'done'", batch_id)
        return int(found or 0)

    async def abandon(self, batch_id: str, error: Json) -> int:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch("SELECT line, custom_id FROM batch_lines WHERE batch_id = $1 "
                                    "AND state != 'done' FOR UPDATE", batch_id)
            done = await asyncio.to_thread(abandoned, rows, error)
            await conn.executemany(
                "UPDATE batch_lines SET state = 'done', ok = false, result = $1, worker = NULL "
                "WHERE batch_id = $2 AND line = $3", [(raw, batch_id, line) for raw, line in done])
            await conn.execute("UPDATE batches SET failed = failed + $1 WHERE id = $2", len(rows), batch_id)
        return len(rows)

    async def result_lines(self, batch_id: str, *, ok: bool) -> AsyncIterator[list[bytes]]:
        last = 0
        while True:
            async with guard():
                rows = await self._pool.fetch(
                    "SELECT line, result FROM batch_lines WHERE batch_id = $1 AND state = 'done' "
                    "AND ok = $2 AND line > $3 ORDER BY line LIMIT 500", batch_id, ok, last)
            if not rows:
                return
            last = int(rows[-1]["line"])
            yield [bytes(row["result"]) for row in rows]

    async def results(self, batch_id: str, *, ok: bool) -> AsyncIterator[Result]:
        async for page in self.result_lines(batch_id, ok=ok):
            for raw in page:
                yield Result.parse(raw)

    async def refresh(self, batch: Batch) -> Batch:
        async with guard():
            row = await self._pool.fetchrow(f"SELECT {_COLUMNS} FROM batches WHERE id = $1", batch.id)
        return batch if row is None else Batch.from_row(row)

    async def close(self) -> None:
        return None

