"""The vector half of the PostgreSQL chunk index (:mod:`app.knowledge.postgres_index`): which
rows a search scores, through which index, with every vector store's work kept apart.

* **Exact when small**: a vector store of at most :data:`EXACT_ROWS` chunks is scored exactly
  (its rows found through the ``(vector_store_id, file_id, chunk_index)`` btree; the unsized
  ``embedding <=> q`` no HNSW index can serve).
* **One HNSW graph per large store**: a store past :data:`EXACT_ROWS` gets its own partial HNSW
  index, ``((embedding::vector(N)) vector_cosine_ops) WHERE vector_store_id = '<store>' AND
  dims = N`` (``halfvec(N)`` for 2,000 < N <= 4,000; above, exact scans), named
  :func:`index_name`, built ``CONCURRENTLY`` off the request path (a background task of the
  replica whose write made the store pass the size; one build or drop at a time over all
  replicas, under an advisory lock; writes go on meanwhile, searches are exact until it is
  valid).  A search names
  its store as a literal, so the planner can only walk that store's graph: another tenant's
  chunks never enter the walk, and neither the result nor the work (graph nodes, heap rows) of
  a search depends on them.  :func:`reconcile` (when the index opens) builds what is missing or
  left invalid by a replica that died, drops the graphs of stores that are gone, and drops the
  former shared per-dimension graphs once every large store has its own.
* **Filters** are checked first on ``vector_store_chunk_files`` (a row per store, file and
  distinct ``attributes``, with its chunk count): the exact number of chunks a filter keeps.
  At most :data:`FILTER_EXACT_ROWS` (or a store without a valid graph): those files' chunks are
  scored exactly (the filter re-checked on each chunk).  More: the store's graph is walked with
  pgvector's iterative scan (``strict_order``, which goes on until enough rows pass), and if it
  still finds fewer than it asked for the kept chunks are scored exactly: a filter never loses
  results to the index.
* **Round trips**: the store sizes, matching files and the scan's settings (``set_config`` of
  ``hnsw.ef_search`` / ``hnsw.iterative_scan``, session-level: the asyncpg pool's reset on
  release, ``RESET ALL``, puts them back) come in one statement, the scan in a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from app.knowledge.filters import Filter, postgres_where

EXACT_ROWS = 10_000  # a store of at most this many chunks: exact scan, no graph of its own
FILTER_EXACT_ROWS = 20_000  # a filter keeping at most this many chunks: exact over them
_GRAPH_LOCK = 0x6F636D + 37  # advisory lock: one graph build or drop at a time, over every replica
GRAPH_LOCK_POLL = 1.0  # seconds between tries of that lock
_STORE_ID = re.compile(r"[A-Za-z0-9_\-]{1,128}\Z")  # ids spliced as literals must be plain
_FILES_DDL = """
CREATE TABLE vector_store_chunk_files (
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    attributes JSONB NOT NULL,
    n INT NOT NULL
);
CREATE INDEX vector_store_chunk_files_file ON vector_store_chunk_files (vector_store_id, file_id);
"""
_FILES_FILL = """
INSERT INTO vector_store_chunk_files
SELECT vector_store_id, file_id, attributes, count(*) FROM vector_store_chunks WHERE {where} GROUP BY 1, 2, 3
"""


def cast_of(dims: int) -> str | None:
    """The sized type an HNSW index of this dimension is built on (``None``: too large)."""
    if dims <= 2000:
        return f"vector({dims})"
    if dims <= 4000:
        return f"halfvec({dims})"
    return None


def index_name(store: str) -> str:
    """The name of a store's own HNSW index."""
    return "vector_store_hnsw_" + hashlib.sha256(store.encode()).hexdigest()[:24]


def _literal(store: str) -> str | None:
    return f"'{store}'" if _STORE_ID.match(store) else None


def index_sql(store: str, dims: int, *, concurrently: bool) -> str | None:
    """The ``CREATE INDEX`` of a store's graph (``None``: no graph for such a store)."""
    cast, literal = cast_of(dims), _literal(store)
    if cast is None or literal is None:
        return None
    ops = "vector_cosine_ops" if cast.startswith("vector") else "halfvec_cosine_ops"
    how = " CONCURRENTLY" if concurrently else ""
    return (f"CREATE INDEX{how} IF NOT EXISTS {index_name(store)} ON vector_store_chunks USING hnsw "
            f"((embedding::{cast}) {ops}) WHERE vector_store_id = {literal} AND dims = {int(dims)}")


# --- what follows the chunks --------------------------------------------------------------------

async def migrate(conn: Any) -> None:
    """The files table and its one fill from the chunks (inside the index's migration
    transaction, under its lock); the graphs are :func:`reconcile`'s."""
    if await conn.fetchval("SELECT to_regclass('vector_store_chunk_files')") is not None:
        return
    await conn.execute(_FILES_DDL)
    await conn.execute(_FILES_FILL.format(where="TRUE"))
    await conn.execute("ANALYZE vector_store_chunk_files")


async def refresh_files(conn: Any, store: str, files: list[str]) -> None:
    """After a store's chunks of ``files`` changed (same transaction): their rows recounted."""
    await conn.execute("DELETE FROM vector_store_chunk_files WHERE vector_store_id = $1 AND "
                       "file_id = ANY($2::text[])", store, files)
    await conn.execute(_FILES_FILL.format(where="vector_store_id = $1 AND file_id = ANY($2::text[])"),
                       store, files)


async def drop_store(conn: Any, store: str) -> None:
    await conn.execute("DELETE FROM vector_store_chunk_files WHERE vector_store_id = $1", store)


# --- the graphs ----------------------------------------------------------------------------------

async def _valid(conn: Any, name: str) -> bool | None:
    """Whether the index exists and is valid (``None``: no such index)."""
    found = await conn.fetchval("SELECT i.indisvalid FROM pg_class AS c JOIN pg_index AS i ON "
                                "i.indexrelid = c.oid WHERE c.relname = $1", name)
    return None if found is None else bool(found)


@contextlib.asynccontextmanager
async def _graph_work(pool: asyncpg.Pool) -> AsyncIterator[Any]:
    """A connection holding the index's graph lock: one build or drop at a time over every
    replica (two ``CONCURRENTLY`` on one table wait for each other: a deadlock).  Taken by
    polling a try-lock, never by waiting in a statement: a statement waiting holds a snapshot,
    which the running build would wait for in turn."""
    async with pool.acquire() as conn:
        while True:  # a lock in the database: polled (see above), no event to wait on
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", _GRAPH_LOCK):
                break
            await asyncio.sleep(GRAPH_LOCK_POLL)
        try:
            yield conn
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _GRAPH_LOCK)


async def build(pool: asyncpg.Pool, store: str, dims: int) -> bool:
    """A store's graph, ``CONCURRENTLY`` (writes and searches go on), under the graph lock (a
    replica that finds it built by another builds nothing).  Whether it is valid now."""
    sql, name = index_sql(store, dims, concurrently=True), index_name(store)
    if sql is None:
        return False
    async with _graph_work(pool) as conn:
        state = await _valid(conn, name)
        if state:
            return True
        if state is False:  # left invalid by a build that died: built again
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        await conn.execute(sql)
        return bool(await _valid(conn, name))


async def drop_graph(pool: asyncpg.Pool, name: str) -> None:
    """A graph no store needs, ``CONCURRENTLY`` (never a lock that would queue every search)."""
    async with _graph_work(pool) as conn:
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


_GRAPHS = """
SELECT c.relname, i.indisvalid, pg_get_expr(i.indpred, i.indrelid)
FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE i.indrelid = 'vector_store_chunks'::regclass AND c.relname LIKE 'vector_store%hnsw%'
"""


async def reconcile(pool: asyncpg.Pool) -> None:
    """Every large store with a valid graph of its own, none for stores that are gone, then the
    former shared per-dimension graphs dropped (they served until the stores' own were valid)."""
    async with pool.acquire() as conn:
        large = await conn.fetch("SELECT vector_store_id, dims FROM vector_store_chunk_counts WHERE n > $1",
                                 EXACT_ROWS)
        graphs = await conn.fetch(_GRAPHS)
    wanted = {index_name(str(r[0])): (str(r[0]), int(r[1])) for r in large}
    shared = [str(g[0]) for g in graphs if str(g[0]).startswith("vector_store_chunks_hnsw_")]
    for name, _valid_now, _pred in graphs:
        if str(name).startswith("vector_store_hnsw_") and name not in wanted:
            live = await pool.fetchval("SELECT 1 FROM vector_store_chunk_counts WHERE n > 0 AND "
                                       "$1 = 'vector_store_hnsw_' || left(encode(sha256(convert_to("
                                       "vector_store_id, 'UTF8')), 'hex'), 24)", name)
            if live is None:
                await drop_graph(pool, str(name))
    complete = True
    for store, dims in wanted.values():
        if index_sql(store, dims, concurrently=True) is not None:
            complete = await build(pool, store, dims) and complete
    if complete:
        for name in shared:
            await drop_graph(pool, name)


# --- search --------------------------------------------------------------------------------------

_SIZES = """
SELECT c.vector_store_id, c.n,
       i.indisvalid IS TRUE OR to_regclass('vector_store_chunks_hnsw_' || $2::int::text) IS NOT NULL,
       set_config('hnsw.ef_search', $3, false){iterative}
FROM vector_store_chunk_counts AS c
LEFT JOIN pg_class AS r ON r.relname = 'vector_store_hnsw_' || left(encode(sha256(convert_to(
    c.vector_store_id, 'UTF8')), 'hex'), 24)
LEFT JOIN pg_index AS i ON i.indexrelid = r.oid
WHERE c.vector_store_id = ANY($1::text[]) AND c.dims = $2 AND c.n > 0
"""
_ITERATIVE = ", set_config('hnsw.iterative_scan', 'strict_order', false)"


def walk_sql(store: str, dims: int, where: str = "TRUE") -> str:
    """The statement walking a store's graph (``$1`` the query vector, ``$2`` the store, ``$3``
    the limit, the filter's parameters from ``$4``): the dimension and the store (a plain id,
    checked) are inlined, so the planner can match the store's partial index and no other."""
    cast, literal = cast_of(dims), _literal(store)
    assert cast is not None and literal is not None
    return (f"SELECT id, 1 - (embedding::{cast} <=> $1::{cast}) FROM vector_store_chunks WHERE "
            f"vector_store_id = {literal} AND vector_store_id = $2 AND dims = {int(dims)} AND {where} "
            f"ORDER BY embedding::{cast} <=> $1::{cast} LIMIT $3")


def _exact(dims: int, where: str) -> str:
    return (f"SELECT id, 1 - (embedding <=> $1::vector) FROM vector_store_chunks WHERE vector_store_id = $2 "
            f"AND dims = {int(dims)} AND {where} ORDER BY embedding <=> $1::vector LIMIT $3")


async def rank(conn: Any, vector: str, dims: int, stores: list[str], limit: int, filters: Filter | None,
               *, iterative: bool = True) -> list[tuple[int, float]]:
    """``(chunk id, cosine similarity)`` best first, at most ``limit``, over ``stores``
    (``vector``: the unit query vector as pgvector text; ``iterative``: pgvector 0.8's
    iterative scans are there).  A large store walks its own graph, or during an upgrade the
    former shared one of its dimension until its own is valid."""
    ef = str(min(max(limit, 64), 1000))
    sizes = await conn.fetch(_SIZES.format(iterative=_ITERATIVE if iterative else ""), stores, dims, ef)
    found: list[tuple[int, float]] = []
    for store, n, graph, *_set in sizes:
        found += await _rank_store(conn, vector, dims, str(store), int(n), bool(graph), limit, filters)
    found.sort(key=lambda p: (-p[1], p[0]))
    return found[:limit]


async def _rank_store(conn: Any, vector: str, dims: int, store: str, n: int, graph: bool, limit: int,
                      filters: Filter | None) -> list[tuple[int, float]]:
    walk = graph and n > EXACT_ROWS and cast_of(dims) is not None and _literal(store) is not None
    files: list[str] | None = None
    where, args, kept_rows = "TRUE", list[Any](), n
    if filters is not None:
        kept_where, kept_args = postgres_where(filters, "attributes", 2)
        kept = await conn.fetch(f"SELECT file_id, n FROM vector_store_chunk_files WHERE vector_store_id = $1 "
                                f"AND {kept_where}", store, *kept_args)
        kept_rows = sum(int(r[1]) for r in kept)  # the chunks the filter keeps, exactly
        if kept_rows == 0:
            return []
        files = [str(r[0]) for r in kept]
        walk = walk and kept_rows > FILTER_EXACT_ROWS
        where, args = postgres_where(filters, "attributes", 4)
    if walk:
        rows = await conn.fetch(walk_sql(store, dims, where), vector, store, limit, *args)
        if len(rows) >= min(limit, kept_rows):
            return [(int(r[0]), float(r[1])) for r in rows]
        # the walk found too few rows passing the filter: score them all
    if files is None:
        rows = await conn.fetch(_exact(dims, where), vector, store, limit, *args)
    else:
        rows = await conn.fetch(_exact(dims, f"file_id = ANY(${4 + len(args)}::text[]) AND {where}"),
                                vector, store, limit, *args, files)
    return [(int(r[0]), float(r[1])) for r in rows]
