"""Keyword statistics stay within a tenant's vector stores (issue 36: "nothing about one
tenant's files is observable by another"), on SQLite (a FTS5 table per store) and PostgreSQL
(document frequencies counted over the searched stores only): another key's uploads change
neither the scores nor the order of a search, in the index that served it before nor in one
opened afresh (another replica, a restart); and the searched stores' own uploads do change
them (the statistics are live, not frozen).  Also: the former single FTS5 table of an existing
SQLite file is split per store when the index opens, and searches find the same chunks."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from app.knowledge import keywords
from app.knowledge.sqlite_index import SqliteChunkIndex
from app.knowledge.vectors import ChunkIndex, Hit
from tests.unit.knowledge.test_index_contract import Opened, chunks, pgvector_url, query  # noqa: F401

A_TEXTS = [
    "turbine blade crack found during inspection",
    "zeppelin hangar inspection report",
    "turbine turbine zeppelin maintenance schedule",
    "crack growth in a zeppelin frame",
    "quarterly budget for the hangar",
]
QUERIES = ["turbine zeppelin", "crack inspection", "zeppelin hangar budget"]


@pytest.fixture(params=["sqlite", "postgres"])
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opened]:
    url = request.getfixturevalue("pgvector_url") if request.param == "postgres" else None
    made = Opened(request.param, tmp_path, url)
    yield made
    await made.close()


def seen(hits: list[Hit]) -> list[tuple[str, float]]:
    return [(h.text, h.score) for h in hits]


async def rankings(index: ChunkIndex) -> list[list[tuple[str, float]]]:
    """Tenant A's keyword and hybrid rankings of every query (texts and exact scores)."""
    out = []
    for text in QUERIES:
        for ranker in ("keyword", "auto"):
            found = await index.search(query(text, ["vs_a"], ranker=ranker, max_num_results=5))
            out.append(seen(found))
    # the raw keyword scores (not only normalised ones): the first hit's score is 1 by definition
    return out


async def test_other_tenants_uploads_do_not_move_scores(opened: Opened) -> None:
    index = await opened.open()
    await index.add(chunks("vs_a", "file-a", A_TEXTS))
    before = await rankings(index)
    assert all(before) and before[0][0][0] == "turbine turbine zeppelin maintenance schedule"
    # tenant B: many chunks holding A's query words, in proportions that would reorder A's
    # results were document frequencies shared ("turbine" common, "zeppelin" rare)
    b_texts = [f"turbine turbine note {i}" for i in range(300)] + ["crack crack crack crack"] * 50
    await index.add(chunks("vs_b", "file-b", b_texts))
    await index.add(chunks("vs_b", "file-b2", ["hangar budget zeppelin"] * 20))
    assert await rankings(index) == before
    fresh = await opened.open()  # another replica, or a restart
    assert await rankings(fresh) == before
    # B's store searched on its own: its own statistics rank it
    b_hits = await fresh.search(query("turbine", ["vs_b"], vector=None, ranker="keyword", max_num_results=3))
    assert {h.vector_store_id for h in b_hits} == {"vs_b"}


async def test_own_uploads_do_move_scores(opened: Opened) -> None:
    """The statistics are the searched store's, kept current: its own new chunks count."""
    index = await opened.open()
    await index.add(chunks("vs_a", "file-a", A_TEXTS))
    probe = query("turbine zeppelin", ["vs_a"], vector=None, ranker="keyword", max_num_results=5)
    raw_before = await _raw_keyword(opened, index, "turbine zeppelin")
    await index.add(chunks("vs_a", "file-a2", [f"turbine note {i}" for i in range(40)]))
    raw_after = await _raw_keyword(opened, await opened.open(), "turbine zeppelin")
    assert raw_after != raw_before
    assert (await index.search(probe))[0].vector_store_id == "vs_a"


async def _raw_keyword(opened: Opened, index: ChunkIndex, text: str) -> list[float]:
    """The keyword ranking's unnormalised scores of store vs_a (before the [0, 1] scaling)."""
    if opened.kind == "sqlite":
        assert isinstance(index, SqliteChunkIndex)
        versions = await index._versions(["vs_a"])
        fts = {s: (name, v) for s, (v, name) in versions.items() if name is not None}
        return [s for _i, s in await index._keywords.search(fts, keywords.keyword_terms(text), 10, None)]
    from app.knowledge.postgres_index import PostgresChunkIndex

    assert isinstance(index, PostgresChunkIndex)
    return [s for _i, s in await index._keyword(query(text, ["vs_a"], vector=None), ["vs_a"], 10)]


async def test_sqlite_shared_fts_table_is_split_per_store(tmp_path: Path) -> None:
    """A file written by the former layout (one FTS5 table for every store, kept by triggers)
    is migrated when the index opens: each store's keywords in its own table."""
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE vector_store_chunks (id INTEGER PRIMARY KEY, vector_store_id TEXT NOT NULL,
            file_id TEXT NOT NULL, chunk_index INTEGER NOT NULL, filename TEXT NOT NULL, text TEXT NOT NULL,
            attributes TEXT NOT NULL, dims INTEGER NOT NULL, vector BLOB NOT NULL);
        CREATE VIRTUAL TABLE vector_store_chunks_fts USING fts5(text, content='vector_store_chunks',
            content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
        CREATE TRIGGER vector_store_chunks_ai AFTER INSERT ON vector_store_chunks BEGIN
            INSERT INTO vector_store_chunks_fts (rowid, text) VALUES (new.id, new.text); END;
        CREATE TABLE vector_store_index_versions (vector_store_id TEXT PRIMARY KEY, version INTEGER NOT NULL);
    """)
    rows = [(1, "vs_a", "f1", 0, "f1.txt", "alpha turbine", "{}", 2, b"\0" * 8),
            (2, "vs_a", "f1", 1, "f1.txt", "beta hangar", "{}", 2, b"\0" * 8),
            (3, "vs_b", "f2", 0, "f2.txt", "turbine elsewhere", "{}", 2, b"\0" * 8)]
    db.executemany("INSERT INTO vector_store_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.executemany("INSERT INTO vector_store_index_versions VALUES (?, 1)", [("vs_a",), ("vs_b",)])
    db.commit()
    db.close()
    conn = await aiosqlite.connect(path)
    try:
        index = await SqliteChunkIndex.create(conn)
        async with conn.execute("SELECT name FROM sqlite_master WHERE name IN "
                                "('vector_store_chunks_fts', 'vector_store_chunks_ai')") as cur:
            assert list(await cur.fetchall()) == []  # the shared table and its trigger are gone
        hits = await index.search(query("turbine", ["vs_a"], vector=None, ranker="keyword"))
        assert [(h.vector_store_id, h.text) for h in hits] == [("vs_a", "alpha turbine")]
        await index.remove_file("vs_a", "f1")  # the migrated keywords are forgotten with their rows
        assert await index.search(query("turbine", ["vs_a"], vector=None, ranker="keyword")) == []
        hits = await index.search(query("turbine", ["vs_b"], vector=None, ranker="keyword"))
        assert [h.text for h in hits] == ["turbine elsewhere"]
        await index.drop_store("vs_b")
        async with conn.execute("SELECT count(*) FROM vector_store_fts") as cur:
            row = await cur.fetchone()
        assert row is not None and row[0] == 1  # vs_a's (empty) table remains; vs_b's is dropped
    finally:
        await conn.close()
