"""Which PostgreSQL driver for the stores: asyncpg vs psycopg 3 (async, its pool), by numbers.

``python -m benchmarks.store_drivers [--n 2000]`` (needs ``pip install "psycopg[binary,pool]"``
besides the test extra) starts a throwaway PostgreSQL (tests/support/postgres.py: Debian's
binaries, fsync off), then per driver, interleaved over
3 rounds: the store's two hot statements, a response upsert (~2 KB resource, ~1 KB input) and
a read by id, sequentially (latency) and 32 at a time (throughput), through a pool of 10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import asyncpg
import orjson
import psycopg_pool

from tests.support.postgres import postgres_server

UPSERT = ("INSERT INTO r (id, owner, body) VALUES ({0}, {1}, {2}) "
          "ON CONFLICT (id) DO UPDATE SET body = excluded.body")
SELECT = "SELECT body FROM r WHERE id = {0} AND owner = {1}"
BODY = orjson.dumps({"id": "x", "output": [{"type": "message", "content": [{"text": "y" * 2000}]}]})


async def _asyncpg(url: str, n: int, concurrency: int) -> float:
    pool = await asyncpg.create_pool(url, min_size=10, max_size=10)
    up, sel = UPSERT.format("$1", "$2", "$3"), SELECT.format("$1", "$2")
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await pool.execute(up, f"id{i}", "alice", BODY)
            await pool.fetchval(sel, f"id{i}", "alice")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - t0
    await pool.close()
    return elapsed


async def _psycopg(url: str, n: int, concurrency: int) -> float:
    pool = psycopg_pool.AsyncConnectionPool(url, min_size=10, max_size=10, open=False)
    await pool.open()
    up, sel = UPSERT.format("%s", "%s", "%s"), SELECT.format("%s", "%s")
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate, pool.connection() as conn:
            await conn.execute(up, (f"id{i}", "alice", BODY))
            cur = await conn.execute(sel, (f"id{i}", "alice"))
            await cur.fetchone()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - t0
    await pool.close()
    return elapsed


async def run(n: int) -> dict[str, Any]:
    with postgres_server() as url:
        conn = await asyncpg.connect(url)
        await conn.execute("CREATE TABLE r (id TEXT PRIMARY KEY, owner TEXT NOT NULL, body BYTEA NOT NULL)")
        await conn.close()
        out: dict[str, dict[str, list[float]]] = {d: {"c1": [], "c32": []} for d in ("asyncpg", "psycopg")}
        for _ in range(3):
            for name, fn in (("asyncpg", _asyncpg), ("psycopg", _psycopg)):
                for label, conc in (("c1", 1), ("c32", 32)):
                    out[name][label].append(await fn(url, n, conc))
    return {d: {"us_per_pair_c1": round(statistics.median(v["c1"]) / n * 1e6, 1),
                "pairs_per_s_c32": round(n / statistics.median(v["c32"]))} for d, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    print(json.dumps(asyncio.run(run(parser.parse_args().n))))


if __name__ == "__main__":
    main()
