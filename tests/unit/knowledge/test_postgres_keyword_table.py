"""The PostgreSQL index's narrow keyword table (``vector_store_chunk_words``,
app/knowledge/postgres_index.py): it holds exactly the chunks' tsvectors, follows every add,
replace, removal and dropped store, a database from before it is backfilled once when the index
opens (keyword search finds the old chunks, ranked as before), and the keyword ranking reads it
(the wide chunk table's GIN index is not what the plan uses)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from app.knowledge.filters import parse
from app.knowledge.postgres_index import PostgresChunkIndex
from tests.unit.knowledge.test_index_contract import chunks, fresh_pgvector_pool, pgvector_url, query  # noqa: F401


@pytest.fixture
async def pool(pgvector_url: str) -> AsyncIterator[asyncpg.Pool]:  # noqa: F811
    made = await fresh_pgvector_pool(pgvector_url)
    yield made
    await made.close()


async def pairs(pool: asyncpg.Pool) -> tuple[list[tuple[int, str, str]], list[tuple[int, str, str]]]:
    """(id, store, tsvector) of the wide table and of the narrow one."""
    wide = await pool.fetch("SELECT id, vector_store_id, tsv::text FROM vector_store_chunks ORDER BY id")
    narrow = await pool.fetch("SELECT id, vector_store_id, tsv::text FROM vector_store_chunk_words "
                              "ORDER BY id")
    return [tuple(r) for r in wide], [tuple(r) for r in narrow]


async def test_narrow_table_follows_every_change(pool: asyncpg.Pool) -> None:
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-1", ["turbine blades crack", "a quiet blue lake"]))
    await index.add(chunks("vs_b", "file-2", ["turbine oil", "green hills"]))
    wide, narrow = await pairs(pool)
    assert len(wide) == 4 and narrow == wide
    await index.add(chunks("vs_a", "file-1", ["only one chunk now about turbines"]))  # replaced
    wide, narrow = await pairs(pool)
    assert len(wide) == 3 and narrow == wide
    await index.remove_file("vs_a", "file-1")
    await index.drop_store("vs_b")
    assert await pairs(pool) == ([], [])


async def test_existing_database_is_backfilled_once(pool: asyncpg.Pool) -> None:
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-1", [f"report {i} on turbine blades" for i in range(5)]
                           + ["the zeppelin hangar", "zeppelin and turbine"], team="red"))
    await index.add(chunks("vs_a", "file-2", ["zeppelin spare parts"], team="blue"))
    words = query("zeppelin turbine", ["vs_a"], vector=None, ranker="keyword")
    before = [(h.text, h.score) for h in await index.search(words)]
    assert {t for t, _s in before} == {"the zeppelin hangar", "zeppelin and turbine", "zeppelin spare parts",
                                       *(f"report {i} on turbine blades" for i in range(5))}
    # a database from before the narrow table: chunks, no keyword copy
    await pool.execute("DROP TABLE vector_store_chunk_words")
    reopened = await PostgresChunkIndex.create(pool)
    wide, narrow = await pairs(pool)
    assert len(wide) == 8 and narrow == wide
    assert [(h.text, h.score) for h in await reopened.search(words)] == before
    red = parse({"type": "eq", "key": "team", "value": "blue"})
    filtered = await reopened.search(query("zeppelin", ["vs_a"], vector=None, ranker="keyword", filters=red))
    assert [h.text for h in filtered] == ["zeppelin spare parts"]
    # opening again copies nothing twice (and a new chunk is added once)
    again = await PostgresChunkIndex.create(pool)
    await again.add(chunks("vs_a", "file-3", ["zeppelin mooring mast"]))
    wide, narrow = await pairs(pool)
    assert len(wide) == 9 and narrow == wide


async def test_keyword_ranking_reads_the_narrow_table(pool: asyncpg.Pool) -> None:
    """The wide table is not where the unfiltered keyword leg looks: with the narrow copy emptied
    behind the index's back, a keyword search finds nothing although the chunks are there; a
    filtered one reads the wide rows (it needs their attributes) and still finds them."""
    index = await PostgresChunkIndex.create(pool)
    await index.add(chunks("vs_a", "file-1", ["zeppelin hangar", "turbine blades"], team="red"))
    words = query("zeppelin", ["vs_a"], vector=None, ranker="keyword")
    assert [h.text for h in await index.search(words)] == ["zeppelin hangar"]
    await pool.execute("DELETE FROM vector_store_chunk_words")
    assert await index.search(words) == []
    red = parse({"type": "eq", "key": "team", "value": "red"})
    filtered = await index.search(query("zeppelin", ["vs_a"], vector=None, ranker="keyword", filters=red))
    assert [h.text for h in filtered] == ["zeppelin hangar"]
    assert await index.chunks("vs_a", "file-1") == ["zeppelin hangar", "turbine blades"]
