"""What a ``previous_response_id`` chain with a large item costs the store: bytes and time.

``python -m benchmarks.store_chain [--turns 20] [--image-kb 1024] [--rounds 3]``: a chain of
``--turns`` responses, each stored with its whole context (as the gateway stores them: previous
input + previous output + new input), the first turn holding an image of ``--image-kb`` KB as a
data URL. For SQLite (a file) and PostgreSQL (a throwaway local server, fsync off), with large
items stored once (``blobs``, :mod:`app.stores.blobs`) and inline in every row (``inline``, as
before): the database's bytes after the chain, and the median milliseconds of a put and of a
get (the read a continuation does), interleaved over ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from app.stores import blobs
from app.stores.postgres import PostgresResponseStore
from app.stores.sqlite_responses import SqliteResponseStore
from tests.support.postgres import fresh_pool, postgres_server

Json = dict[str, Any]
INLINE = 1 << 62  # a threshold no item reaches: every item stays in its row


def _context(turns: int, image_kb: int) -> list[list[Json]]:
    image = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": "data:image/png;base64,"
         + base64.b64encode(os.urandom(image_kb * 768)).decode()}]}
    out, context = [], [image]
    for n in range(turns):
        context = [*context, {"type": "message", "role": "user", "content": f"question {n} " * 20},
                   {"type": "message", "role": "assistant", "content": [
                       {"type": "output_text", "text": f"answer {n} " * 60}]}]
        out.append(context)
    return out


async def _chain(store: Any, contexts: list[list[Json]], tag: str) -> tuple[float, float]:
    puts, gets = [], []
    for n, context in enumerate(contexts):
        rid = f"{tag}-{n}"
        t0 = time.perf_counter()
        await store.put({"id": rid, "object": "response", "created_at": 1, "status": "completed",
                         "output": []}, context, "bench")
        t1 = time.perf_counter()
        got = await store.get(rid, "bench")
        t2 = time.perf_counter()
        assert got is not None and len(got.input_items) == len(context)
        puts.append(t1 - t0)
        gets.append(t2 - t1)
    return statistics.median(puts) * 1000, statistics.median(gets) * 1000


async def _sqlite(contexts: list[list[Json]], path: Path, tag: str) -> tuple[float, float, int]:
    store = await SqliteResponseStore.open(path)
    try:
        put, get = await _chain(store, contexts, tag)
        await store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        await store.close()
    return put, get, await asyncio.to_thread(os.path.getsize, path)


async def _postgres(contexts: list[list[Json]], url: str, tag: str) -> tuple[float, float, int]:
    pool = await fresh_pool(url)
    try:
        put, get = await _chain(PostgresResponseStore(pool), contexts, tag)
        size = await pool.fetchval(
            "SELECT pg_total_relation_size('responses') + pg_total_relation_size('blobs') "
            "+ pg_total_relation_size('response_blobs')")
    finally:
        await pool.close()
    return put, get, int(size)


async def run(turns: int, image_kb: int, rounds: int) -> list[Json]:
    contexts = _context(turns, image_kb)
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    with postgres_server() as url, tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for mode, minimum in (("inline", INLINE), ("blobs", blobs.BLOB_MIN)):
                saved, blobs.BLOB_MIN = blobs.BLOB_MIN, minimum
                try:
                    results.setdefault(("SQLite", mode), []).append(
                        await _sqlite(contexts, Path(tmp) / f"{mode}{r}.sqlite3", f"{mode}{r}"))
                    results.setdefault(("PostgreSQL", mode), []).append(
                        await _postgres(contexts, url, f"{mode}{r}"))
                finally:
                    blobs.BLOB_MIN = saved
    return [{"store": store, "mode": mode, "turns": turns, "image_kb": image_kb,
             "put_ms": round(statistics.median(s[0] for s in rows), 3),
             "get_ms": round(statistics.median(s[1] for s in rows), 3),
             "database_mb": round(statistics.median(s[2] for s in rows) / 2**20, 2)}
            for (store, mode), rows in results.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--image-kb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for row in asyncio.run(run(args.turns, args.image_kb, args.rounds)):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
