"""What one stored response's write costs on the SQLite store, in process, one at a time (c=1):
``python -m benchmarks.store_write [--writes N] [--rounds R] [--path FILE]``.

Interleaved rounds of four ways to write the same row (the resource and input of a short
``/v1/responses`` answer): ``hops`` the per-statement aiosqlite calls inside
``sqlite_db.transaction`` (BEGIN, three statements, COMMIT: five hops to the connection's
thread and back), ``write`` the store's ``put`` (``sqlite_write.write``: the whole transaction in one
hop), ``bare`` the same statements on a plain ``sqlite3`` connection on the event loop's
thread (the floor: SQLite's own work, no hop), and ``hop`` one empty hop (aiosqlite's round
trip alone).  With ``--postgres URL`` (a scratch database: it creates the tables) the same row on
PostgreSQL instead: ``tx`` the transaction of separate statements (BEGIN, DELETE, upsert,
COMMIT: four round trips) against ``put``, the store's one statement.  Markdown on stdout: wall
µs per write p50 / p90 and process CPU µs per write, median over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from app.stores import blobs
from app.stores.postgres import PostgresResponseStore, open_pool
from app.stores.sqlite_db import transaction
from app.stores.sqlite_responses import _PUT, SqliteResponseStore

RESOURCE: dict[str, Any] = {
    "id": "resp_x", "object": "response", "created_at": 1, "status": "completed", "model": "m",
    "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Hello there! " * 8, "annotations": []}]}],
    "usage": {"input_tokens": 70, "output_tokens": 32, "total_tokens": 102}, "store": True,
    "tools": [], "metadata": {}, "parallel_tool_calls": True, "text": {"format": {"type": "text"}},
}
INPUT = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}]


async def _hops(store: SqliteResponseStore, rid: str) -> None:
    resource = {**RESOURCE, "id": rid}
    stored, now = blobs.split(INPUT), time.time()
    async with transaction(store.connection) as db:
        await db.execute("DELETE FROM response_blobs WHERE id = ?", (rid,))
        await db.executemany("INSERT INTO response_blobs (id, owner, digest) VALUES (?, ?, ?)", [])
        await db.execute(_PUT, (rid, 1, "completed", orjson.dumps(resource), stored.items, "t", now))


async def _pg_tx(store: PostgresResponseStore, rid: str) -> None:
    resource = {**RESOURCE, "id": rid}
    stored, now = blobs.split(INPUT), time.time()
    async with store._pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM response_blobs WHERE id = $1", rid)
        await conn.execute(
            "INSERT INTO responses (id, owner, created_at, status, resource, input_items, updated_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
            "created_at = excluded.created_at, status = excluded.status, resource = excluded.resource, "
            "input_items = excluded.input_items, updated_at = excluded.updated_at",
            rid, "t", 1, "completed", orjson.dumps(resource), stored.items, now)


def _bare(conn: sqlite3.Connection, rid: str) -> None:
    resource = {**RESOURCE, "id": rid}
    stored, now = blobs.split(INPUT), time.time()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("DELETE FROM response_blobs WHERE id = ?", (rid,))
    conn.execute(_PUT, (rid, 1, "completed", orjson.dumps(resource), stored.items, "t", now))
    conn.commit()


async def _bare_async(conn: sqlite3.Connection, rid: str) -> None:
    _bare(conn, rid)


async def _measure(n: int, one: Callable[[str], Awaitable[None]], tag: str) -> tuple[float, float, float]:
    walls: list[float] = []
    cpu0 = time.process_time()
    for i in range(n):
        began = time.perf_counter()
        await one(f"resp_{tag}_{i % 50}")  # 50 rows rewritten: the upsert path, as the end's write
        walls.append(time.perf_counter() - began)
    cpu = (time.process_time() - cpu0) / n
    walls.sort()
    return walls[len(walls) // 2] * 1e6, walls[int(len(walls) * 0.9)] * 1e6, cpu * 1e6


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store_write")
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--path", type=Path)
    parser.add_argument("--postgres", metavar="URL")
    args = parser.parse_args(argv)
    if args.postgres:
        pool = await open_pool(args.postgres)
        pg = PostgresResponseStore(pool, owns_pool=True)
        _report(await _rounds(args, {"tx": lambda rid: _pg_tx(pg, rid),
                                     "put": lambda rid: pg.put({**RESOURCE, "id": rid}, INPUT, "t")}))
        await pg.close()
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or Path(tmp) / "store.sqlite3"
        store = await SqliteResponseStore.open(path)
        conn = sqlite3.connect(str(path), isolation_level=None)
        conn.execute("PRAGMA synchronous=NORMAL")
        db = store.connection
        ways: dict[str, Callable[[str], Awaitable[None]]] = {
            "hops": lambda rid: _hops(store, rid),
            "write": lambda rid: store.put({**RESOURCE, "id": rid}, INPUT, "t"),
            "bare": lambda rid: _bare_async(conn, rid),
            "hop": lambda rid: db._execute(lambda: None),  # type: ignore[no-untyped-call]
        }
        results = await _rounds(args, ways)
        conn.close()
        await store.close()
    _report(results)


Results = dict[str, list[tuple[float, float, float]]]


async def _rounds(args: argparse.Namespace, ways: dict[str, Callable[[str], Awaitable[None]]],
                  ) -> Results:
    results: Results = {name: [] for name in ways}
    for r in range(args.rounds):
        names = list(ways)
        names = names[r % len(names):] + names[:r % len(names)]  # rotated order
        for name in names:
            results[name].append(await _measure(args.writes, ways[name], name))
    return results


def _report(results: Results) -> None:
    print("| way | wall p50 µs | wall p90 µs | CPU µs/write |\n|---|---|---|---|")
    for name, rows in results.items():
        p50, p90, cpu = (statistics.median(col) for col in zip(*rows, strict=True))
        print(f"| {name} | {p50:.0f} | {p90:.0f} | {cpu:.0f} |")


if __name__ == "__main__":
    asyncio.run(main())
