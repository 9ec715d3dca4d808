"""The PostgreSQL index's keyword tables (app/knowledge/postgres_keywords.py) on a real
PostgreSQL 18 + pgvector: the per-store terms and the narrow table follow every add, replace,
attribute change, removal and dropped store; the ranking is the former one (idf x ``ts_rank``
of ``plainto_tsquery`` on the wide rows' English tsvector, recomputed here as the oracle);
a database of today's schema (or from before the narrow table) is migrated once when the index
opens; the keyword leg reads only the narrow table; and a tenant's keyword search does the same
work however many chunks another tenant adds (the index's postings are per store)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from app.knowledge import keywords, postgres_keywords
from app.knowledge.filters import parse
from app.knowledge.postgres_index import PostgresChunkIndex
from tests.unit.knowledge.test_index_contract import chunks, fresh_pgvector_pool, pgvector_url, query  # noqa: F401


@pytest.fixture
async def pool(pgvector_url: str) -> AsyncIterator[asyncpg.Pool]:  # noqa: F811
    made = await fresh_pgvector_pool(pgvector_url)
    yield made
    await made.close()


async def consistent(pool: asyncpg.Pool) -> int:
    """Asserts the keyword tables say what the wide rows say; returns the number of chunks."""
    wide = await pool.fetch("SELECT c.id, c.vector_store_id, c.attributes::text, u.lexeme, u.positions "
                            "FROM vector_store_chunks AS c, unnest(c.tsv) AS u")
    narrow = await pool.fetch(
        "SELECT w.id, w.vector_store_id, w.attributes::text, t.lexeme, u.positions "
        "FROM vector_store_chunk_terms AS w CROSS JOIN LATERAL unnest(w.tsv) AS u "
        "JOIN vector_store_terms AS t ON u.lexeme = 't' || t.term AND t.vector_store_id = w.vector_store_id")
    assert sorted(tuple(r) for r in narrow) == sorted(tuple(r) for r in wide)
    rows = "SELECT id, vector_store_id, attributes::text FROM {} ORDER BY id"
    ids = await pool.fetch(rows.format("vector_store_chunks"))
    narrow_ids = await pool.fetch(rows.format("vector_store_chunk_terms"))
    assert [tuple(r) for r in narrow_ids] == [tuple(r) for r in ids]
    counted: dict[tuple[str, str], int] = {}
    for _id, store, _attributes, lexeme, _positions in wide:
        counted[(store, lexeme)] = counted.get((store, lexeme), 0) + 1
    terms = await pool.fetch("SELECT vector_store_id, lexeme, df FROM vector_store_terms WHERE df <> 0")
    assert {(r[0], r[1]): r[2] for r in terms} == counted
    return len(ids)


async def test_keyword_tables_follow_every_change(pool: asyncpg.Pool) -> None:
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-1", ["turbine blades crack", "a quiet blue lake", "the"],
                           team="red"))
    await index.add(chunks("vs_b", "file-2", ["turbine oil", "green hills", "turbine turbine blades"]))
    assert await consistent(pool) == 6
    turbine = await pool.fetch("SELECT term FROM vector_store_terms WHERE lexeme = 'turbin'")
    assert len({r[0] for r in turbine}) == 2  # the same word in two stores: two terms
    await index.add(chunks("vs_a", "file-1", ["only one chunk now about turbines"], team="blue"))  # replaced
    assert await consistent(pool) == 4
    await index.set_attributes("vs_b", "file-2", {"team": "green", "year": 2024})
    assert await consistent(pool) == 4
    await index.remove_file("vs_a", "file-1")
    assert await consistent(pool) == 3
    await index.drop_store("vs_b")
    assert await consistent(pool) == 0
    # a dropped store's terms are gone; a removed file's words stay as terms of no chunk (df 0)
    left = await pool.fetch("SELECT vector_store_id, df FROM vector_store_terms")
    assert left and {tuple(r) for r in left} == {("vs_a", 0)}


async def former_ranking(pool: asyncpg.Pool, text: str, stores: list[str]) -> list[tuple[int, float]]:
    """The ranking as the index computed it before the keyword tables: idf (document
    frequencies counted on the wide rows) x ``ts_rank(tsv, plainto_tsquery(word), 1)``."""
    words = keywords.keyword_terms(text)
    total = int(await pool.fetchval("SELECT count(*) FROM vector_store_chunks WHERE vector_store_id = "
                                    "ANY($1::text[])", stores))
    df = {w: int(await pool.fetchval("SELECT count(*) FROM vector_store_chunks WHERE vector_store_id = "
                                     "ANY($1::text[]) AND tsv @@ plainto_tsquery('english', $2)", stores, w))
          for w in words}
    scores: dict[int, float] = {}
    for w in keywords.selective(df, total):
        rows = await pool.fetch("SELECT id, ts_rank(tsv, plainto_tsquery('english', $2), 1) FROM "
                                "vector_store_chunks WHERE vector_store_id = ANY($1::text[]) AND "
                                "tsv @@ plainto_tsquery('english', $2)", stores, w)
        for chunk, r in rows:
            scores[chunk] = scores.get(chunk, 0.0) + keywords.idf(df[w], total) * float(r)
    return sorted(scores.items(), key=lambda p: (-p[1], p[0]))


async def test_ranking_is_the_former_one(pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keywords, "COMMON_MIN", 3)
    index = await PostgresChunkIndex.create(pool)
    texts = ["turbine blade crack found during the turbine inspection", "max_num_results sets the results",
             "zeppelin hangar inspection report", "the number of results is max", "turbine zeppelin",
             "crack growth in a zeppelin frame under load", "blade blade blade", "quarterly budget"]
    await index.add(chunks("vs_a", "file-a", texts))
    await index.add(chunks("vs_b", "file-b", [*texts[::-1], "turbine oil", "turbine pump", "turbine fan"]))
    for text, stores in [("turbine blade crack", ["vs_a"]), ("zeppelin inspection report", ["vs_b"]),
                         ("max_num_results turbine", ["vs_a"]), ("turbine zeppelin crack", ["vs_a", "vs_b"]),
                         ("blade", ["vs_a", "vs_b"]), ("nothing matches here", ["vs_a"])]:
        async with pool.acquire() as conn:
            got = await postgres_keywords.rank(conn, text, stores, 50, None)
        want = await former_ranking(pool, text, stores)
        assert [c for c, _s in got] == [c for c, _s in want], text
        assert all(abs(g - w) < 1e-9 for (_c, g), (_d, w) in zip(got, want, strict=True)), text
    assert [c for c, _s in want] == []  # the last query: no word in any chunk


FORMER_SCHEMA = """
DROP TABLE vector_store_chunk_terms;
DROP TABLE vector_store_terms;
CREATE INDEX vector_store_chunks_tsv ON vector_store_chunks USING GIN (tsv);
CREATE TABLE vector_store_chunk_words (
    id BIGINT PRIMARY KEY REFERENCES vector_store_chunks (id) ON DELETE CASCADE,
    vector_store_id TEXT NOT NULL,
    tsv tsvector NOT NULL
);
ALTER TABLE vector_store_chunk_words ALTER COLUMN tsv SET STORAGE MAIN;
CREATE INDEX vector_store_chunk_words_tsv ON vector_store_chunk_words USING GIN (tsv);
INSERT INTO vector_store_chunk_words SELECT id, vector_store_id, tsv FROM vector_store_chunks;
"""


@pytest.mark.parametrize("former", ["narrow words table", "wide table only"])
async def test_existing_database_is_migrated_once(pool: asyncpg.Pool, former: str) -> None:
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-1", [f"report {i} on turbine blades" for i in range(5)]
                           + ["the zeppelin hangar", "zeppelin and turbine"], team="red"))
    await index.add(chunks("vs_a", "file-2", ["zeppelin spare parts"], team="blue"))
    words = query("zeppelin turbine", ["vs_a"], vector=None, ranker="keyword")
    blue = parse({"type": "eq", "key": "team", "value": "blue"})
    searches = [words, query("zeppelin turbine", ["vs_a"]), query("zeppelin", ["vs_a"], filters=blue)]
    before = [[(h.text, h.score) for h in await index.search(q)] for q in searches]
    assert len(before[0]) == 8 and before[2] == [("zeppelin spare parts", 1.0)]
    # today's schema (the narrow English copy and the wide GIN index), or the one before it
    await pool.execute(FORMER_SCHEMA)
    if former == "wide table only":
        await pool.execute("DROP TABLE vector_store_chunk_words")
    reopened = await PostgresChunkIndex.create(pool)
    assert await consistent(pool) == 8
    assert [[(h.text, h.score) for h in await reopened.search(q)] for q in searches] == before
    gone = await pool.fetchrow("SELECT to_regclass('vector_store_chunk_words'), "
                               "to_regclass('vector_store_chunks_tsv')")
    assert gone is not None and tuple(gone) == (None, None)
    # opening again copies and counts nothing twice; a new chunk is added once
    again = await PostgresChunkIndex.create(pool)
    await again.add(chunks("vs_a", "file-3", ["zeppelin mooring mast"]))
    assert await consistent(pool) == 9


async def test_keyword_ranking_reads_the_narrow_table(pool: asyncpg.Pool) -> None:
    """The wide rows are not where the keyword leg looks, filtered or not: with the narrow copy
    emptied behind the index's back, keyword searches find nothing although the chunks are
    there; the filter is checked on the narrow rows' attributes."""
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-1", ["zeppelin hangar", "turbine blades"], team="red"))
    words = query("zeppelin", ["vs_a"], vector=None, ranker="keyword")
    red = parse({"type": "eq", "key": "team", "value": "red"})
    filtered = query("zeppelin", ["vs_a"], vector=None, ranker="keyword", filters=red)
    assert [h.text for h in await index.search(words)] == ["zeppelin hangar"]
    assert [h.text for h in await index.search(filtered)] == ["zeppelin hangar"]
    await pool.execute("UPDATE vector_store_chunk_terms SET attributes = '{}'")
    assert await index.search(filtered) == []
    await pool.execute("DELETE FROM vector_store_chunk_terms")
    assert await index.search(words) == []
    assert await index.chunks("vs_a", "file-1") == ["zeppelin hangar", "turbine blades"]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


async def keyword_work(pool: asyncpg.Pool, text: str, stores: list[str]) -> dict[str, int]:
    """What the keyword leg's ranking statement reads: index entries found, heap blocks, buffers
    (``EXPLAIN (ANALYZE, BUFFERS)``; sequential scans off, so that a tiny table's plan is the
    index-driven one a large table gets)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        planned = await postgres_keywords.plan(conn, text, stores, 50, None)
        assert planned is not None
        explained = json.loads(await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + planned[0],
                                                   *planned[1]))
    nodes = _nodes(explained[0]["Plan"])
    index = [n for n in nodes if n["Node Type"] == "Bitmap Index Scan"]
    heap = [n for n in nodes if n["Node Type"] == "Bitmap Heap Scan"]
    assert len(index) == 1 and len(heap) == 1
    top = explained[0]["Plan"]
    return {"index rows": index[0]["Actual Rows"], "heap blocks": heap[0].get("Exact Heap Blocks", 0),
            "removed": heap[0].get("Rows Removed by Filter", 0)
            + heap[0].get("Rows Removed by Index Recheck", 0),
            "buffers": top["Shared Hit Blocks"] + top["Shared Read Blocks"]}


async def test_search_work_does_not_grow_with_another_tenants_chunks(pool: asyncpg.Pool) -> None:
    """Issue 36 item 6 (timing): tenant A's keyword search reads A's postings only.  Tenant B
    adds 40x A's chunks with the same words: A's ranking statement finds the same index
    entries, reads the same heap blocks and about the same buffers (the index's entry tree
    may gain a level), where a shared index would have read B's postings and rows too."""
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-a", [f"turbine blade crack report {i}" for i in range(50)]))
    before = await keyword_work(pool, "turbine crack", ["vs_a"])
    assert before["index rows"] == 50 and before["removed"] == 0
    for n in range(4):
        texts = [f"turbine crack and blade {n} {i}" for i in range(500)]
        await index.add(chunks("vs_b", f"file-b{n}", texts))
    await pool.execute("ANALYZE")
    after = await keyword_work(pool, "turbine crack", ["vs_a"])
    assert after["index rows"] == before["index rows"] and after["heap blocks"] == before["heap blocks"]
    assert after["removed"] == 0 and after["buffers"] <= before["buffers"] + 3, (before, after)
    both = await keyword_work(pool, "turbine crack", ["vs_a", "vs_b"])  # B's own search does read B's
    assert both["index rows"] == 2050
