"""The PostgreSQL index's vector half (app/knowledge/postgres_vectors.py) on a real PostgreSQL 18 +
pgvector 0.8: a large store walks its own HNSW graph and no other (its work, read with
``EXPLAIN (ANALYZE, BUFFERS)``, is the same however many chunks another tenant adds, where the
former shared graph's walk reads them); filtered searches equal the exact ranking on random
data (through the exact scan of the kept files, and through the graph walk with its exact
fallback); the per-file table follows every change; graphs are built, rebuilt and dropped off
the request path; and a database of the previous schema (one shared graph per dimension, no
per-file table) is migrated."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import numpy as np
import pytest

from app.knowledge import postgres_vectors
from app.knowledge.filters import matches, parse
from app.knowledge.postgres_index import PostgresChunkIndex, _vector_text
from app.knowledge.vectors import Chunk, Query
from tests.unit.knowledge.test_index_contract import fresh_pgvector_pool, pgvector_url  # noqa: F401

DIMS = 16


@pytest.fixture
async def pool(pgvector_url: str) -> AsyncIterator[asyncpg.Pool]:  # noqa: F811
    made = await fresh_pgvector_pool(pgvector_url)
    yield made
    await made.close()


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores past 50 chunks get a graph of their own (instead of 10,000)."""
    monkeypatch.setattr(postgres_vectors, "EXACT_ROWS", 50)


def unit(v: np.ndarray) -> np.ndarray:
    out: np.ndarray = v / np.linalg.norm(v)
    return out


def random_chunks(store: str, n: int, seed: int, per_file: int = 10) -> list[Chunk]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIMS))
    out = []
    for i in range(n):
        f = i // per_file
        attributes: dict[str, str | float | bool] = {"team": f"t{f % 5}", "year": 2000 + f % 7,
                                                     "draft": bool(f % 2)}
        out.append(Chunk(store, f"{store}-f{f}", i % per_file, f"chunk {i}", unit(vectors[i]).tolist(),
                         f"{f}.txt", attributes))
    return out


async def add_all(index: PostgresChunkIndex, chunks: list[Chunk]) -> None:
    for start in range(0, len(chunks), 500):
        await index.add(chunks[start:start + 500])


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


async def walk_work(pool: asyncpg.Pool, store: str, vector: list[float]) -> dict[str, Any]:
    """What the graph walk of ``store`` reads: the index it scans, rows it returns and drops,
    buffers (sorts off so that a small table's plan is the one a large store gets)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_sort = off; SET LOCAL hnsw.ef_search = 64; "
                           "SET LOCAL hnsw.iterative_scan = strict_order")
        explained = json.loads(await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + postgres_vectors.walk_sql(store, DIMS),
            _vector_text(vector), store, 50))
    scans = [n for n in _nodes(explained[0]["Plan"]) if n["Node Type"] == "Index Scan"]
    assert len(scans) == 1
    top = explained[0]["Plan"]
    return {"index": scans[0]["Index Name"], "rows": scans[0]["Actual Rows"],
            "removed": scans[0].get("Rows Removed by Filter", 0),
            "buffers": top["Shared Hit Blocks"] + top["Shared Read Blocks"]}


async def test_walk_work_does_not_grow_with_another_tenants_chunks(pool: asyncpg.Pool, small: None) -> None:
    """Issue 36 item 6 (timing): tenant A's vector search walks A's graph only.  Tenant B adds
    10x A's chunks: A's walk scans the same index, returns the same rows, drops none and reads
    the same buffers.  The control: on one shared graph (the former schema) A's walk reads B's
    rows and drops them."""
    index = await PostgresChunkIndex.create(pool)
    await add_all(index, random_chunks("vs_a", 300, seed=1))
    await index.settled()
    probe = unit(np.random.default_rng(5).standard_normal(DIMS)).tolist()
    before = await walk_work(pool, "vs_a", probe)
    assert before["index"] == postgres_vectors.index_name("vs_a") and before["rows"] == 50
    assert before["removed"] == 0
    await add_all(index, random_chunks("vs_b", 3000, seed=2))
    await index.settled()
    await pool.execute("ANALYZE")
    after = await walk_work(pool, "vs_a", probe)
    assert after == before
    # the control: one graph for every store, as before this change
    await pool.execute(f"DROP INDEX {postgres_vectors.index_name('vs_a')}; "
                       f"DROP INDEX {postgres_vectors.index_name('vs_b')}; "
                       f"CREATE INDEX vector_store_chunks_hnsw_{DIMS} ON vector_store_chunks USING hnsw "
                       f"((embedding::vector({DIMS})) vector_cosine_ops) WHERE dims = {DIMS}")
    shared = await walk_work(pool, "vs_a", probe)
    assert shared["index"] == f"vector_store_chunks_hnsw_{DIMS}" and shared["removed"] > 0


def exact(chunks: list[Chunk], vector: list[float], flt: dict[str, Any] | None,
          k: int) -> tuple[list[str], dict[str, float]]:
    """The exact top ``k`` (``file#chunk``) by cosine among the chunks passing ``flt``, and
    every chunk's cosine."""
    q = np.array(vector)
    score = {f"{c.file_id}#{c.index}": float(np.dot(q, np.array(c.vector))) for c in chunks}
    kept = [f"{c.file_id}#{c.index}" for c in chunks if flt is None or matches(flt, c.attributes)]
    kept.sort(key=lambda key: -score[key])
    return kept[:k], score


FILTERS = [
    {"type": "eq", "key": "team", "value": "t3"},
    {"type": "in", "key": "year", "value": [2001, 2004]},
    {"type": "and", "filters": [{"type": "ne", "key": "team", "value": "t1"},
                                {"type": "gte", "key": "year", "value": 2003}]},
    {"type": "or", "filters": [{"type": "eq", "key": "draft", "value": True},
                               {"type": "lt", "key": "year", "value": 2001}]},
    {"type": "eq", "key": "team", "value": "nobody"},
]


@pytest.mark.parametrize("path", ["exact over the kept files", "graph walk"])
async def test_filtered_results_equal_the_exact_ranking(pool: asyncpg.Pool, small: None,
                                                        monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path == "graph walk":  # every filter walks the graph (then falls back if it finds too few)
        monkeypatch.setattr(postgres_vectors, "FILTER_EXACT_ROWS", 0)
    index = await PostgresChunkIndex.create(pool)
    data = random_chunks("vs_a", 1200, seed=3)
    await add_all(index, data)
    await add_all(index, random_chunks("vs_b", 600, seed=4))  # another store's rows: never returned
    await index.settled()
    assert await pool.fetchval("SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass",
                               postgres_vectors.index_name("vs_a"))
    rng = np.random.default_rng(9)
    found = wanted = 0
    for i in range(30):
        flt = parse(FILTERS[i % len(FILTERS)])
        vector = unit(rng.standard_normal(DIMS)).tolist()
        k = [5, 10, 50][i % 3]
        hits = await index.search(Query("alice", ["vs_a"], "", vector, max_num_results=k, filters=flt,
                                        ranker="none"))
        got = [f"{h.file_id}#{h.chunk_index}" for h in hits]
        want, score = exact(data, vector, flt, k)
        assert all(matches(flt, h.attributes) and h.vector_store_id == "vs_a" for h in hits)
        assert len(got) == len(want)  # a filter never loses results to the index
        if path == "exact over the kept files":  # the same ranking (up to float32 rounding of ties)
            assert all(abs(score[g] - score[w]) < 1e-5 for g, w in zip(got, want, strict=True)), (got, want)
        found += len(set(got) & set(want))
        wanted += len(want)
    assert found >= 0.95 * wanted  # the graph's approximation (exact for the other path)


async def test_files_table_follows_every_change(pool: asyncpg.Pool) -> None:
    index = await PostgresChunkIndex.create(pool)

    async def files() -> dict[tuple[str, str], tuple[str, int]]:
        recount = await pool.fetch("SELECT vector_store_id, file_id, attributes::text, count(*) FROM "
                                   "vector_store_chunks GROUP BY 1, 2, 3")
        rows = await pool.fetch("SELECT vector_store_id, file_id, attributes::text, n FROM "
                                "vector_store_chunk_files")
        assert sorted(tuple(r) for r in rows) == sorted(tuple(r) for r in recount)
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}

    await add_all(index, random_chunks("vs_a", 30, seed=1))
    await add_all(index, random_chunks("vs_b", 20, seed=2))
    assert len(await files()) == 5
    await index.add(random_chunks("vs_a", 4, seed=5))  # vs_a-f0 replaced by 4 chunks
    assert (await files())[("vs_a", "vs_a-f0")][1] == 4
    await index.set_attributes("vs_a", "vs_a-f1", {"team": "green"})
    assert (await files())[("vs_a", "vs_a-f1")] == ('{"team": "green"}', 10)
    await index.remove_file("vs_a", "vs_a-f2")
    assert ("vs_a", "vs_a-f2") not in await files()
    await index.drop_store("vs_b")
    assert {s for s, _f in await files()} == {"vs_a"}


async def graphs(pool: asyncpg.Pool) -> dict[str, bool]:
    rows = await pool.fetch("SELECT c.relname, i.indisvalid FROM pg_index AS i JOIN pg_class AS c ON "
                            "c.oid = i.indexrelid WHERE c.relname LIKE 'vector_store%hnsw%'")
    return {str(r[0]): bool(r[1]) for r in rows}


async def test_graphs_built_dropped_and_rebuilt_off_the_request_path(
        pool: asyncpg.Pool, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    index = await PostgresChunkIndex.create(pool)
    await add_all(index, random_chunks("vs_a", 40, seed=1))
    await add_all(index, random_chunks("vs_b", 80, seed=2))
    await index.settled()
    a, b = postgres_vectors.index_name("vs_a"), postgres_vectors.index_name("vs_b")
    assert await graphs(pool) == {b: True}  # only the store past the size has one
    await add_all(index, random_chunks("vs_a", 60, seed=3))  # now past it too
    await index.settled()
    assert await graphs(pool) == {a: True, b: True}
    await index.drop_store("vs_b")
    await index.settled()
    assert await graphs(pool) == {a: True}
    # a replica died mid-build (an invalid index left) and a store's graph outlived its store:
    # the next opening rebuilds the one and drops the other
    await pool.execute(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{a}'::regclass")
    await pool.execute(postgres_vectors.index_sql("vs_gone", DIMS, concurrently=False) or "")
    assert await graphs(pool) == {a: False, postgres_vectors.index_name("vs_gone"): True}
    reopened = await PostgresChunkIndex.create(pool)
    await reopened.settled()
    assert await graphs(pool) == {a: True}
    # another replica holds the graph lock (building it): this one waits, then finds it built
    monkeypatch.setattr(postgres_vectors, "GRAPH_LOCK_POLL", 0.05)
    await pool.execute(f"DROP INDEX {a}")
    async with pool.acquire() as other:
        await other.execute("SELECT pg_advisory_lock($1)", postgres_vectors._GRAPH_LOCK)
        waiting = asyncio.ensure_future(postgres_vectors.build(pool, "vs_a", DIMS))
        await asyncio.sleep(0.5)
        assert not waiting.done() and await graphs(pool) == {}
        await other.execute(postgres_vectors.index_sql("vs_a", DIMS, concurrently=False) or "")
        oid = await other.fetchval("SELECT $1::regclass::oid", a)
        await other.execute("SELECT pg_advisory_unlock($1)", postgres_vectors._GRAPH_LOCK)
    assert await waiting is True and await graphs(pool) == {a: True}
    assert await pool.fetchval("SELECT $1::regclass::oid", a) == oid  # not built twice


async def test_previous_schema_is_migrated(pool: asyncpg.Pool, small: None) -> None:
    index = await PostgresChunkIndex.create(pool)
    data = random_chunks("vs_a", 200, seed=6)
    await add_all(index, data)
    await index.settled()
    team = parse({"type": "eq", "key": "team", "value": "t2"})
    probes = [unit(np.random.default_rng(s).standard_normal(DIMS)).tolist() for s in range(5)]
    searches = [Query("alice", ["vs_a"], "", p, max_num_results=10, ranker="none", filters=f)
                for p in probes for f in (None, team)]
    before = [[(h.file_id, h.chunk_index) for h in await index.search(q)] for q in searches]
    # the previous schema: one graph per dimension for every store, no per-file table
    await pool.execute(f"DROP INDEX {postgres_vectors.index_name('vs_a')}; "
                       "DROP TABLE vector_store_chunk_files; "
                       f"CREATE INDEX vector_store_chunks_hnsw_{DIMS} ON vector_store_chunks USING hnsw "
                       f"((embedding::vector({DIMS})) vector_cosine_ops) WHERE dims = {DIMS}")
    reopened = await PostgresChunkIndex.create(pool)
    during = [[(h.file_id, h.chunk_index) for h in await reopened.search(q)] for q in searches]
    await reopened.settled()
    assert await graphs(pool) == {postgres_vectors.index_name("vs_a"): True}  # the shared one dropped
    after = [[(h.file_id, h.chunk_index) for h in await reopened.search(q)] for q in searches]
    for got in (during, after):
        same = sum(len(set(g) & set(w)) for g, w in zip(got, before, strict=True))
        assert same >= 0.95 * sum(len(w) for w in before)
    rows = await pool.fetchval("SELECT sum(n) FROM vector_store_chunk_files WHERE vector_store_id = 'vs_a'")
    assert rows == 200
