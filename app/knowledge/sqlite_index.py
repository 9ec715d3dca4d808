"""The embedded :class:`~app.knowledge.vectors.ChunkIndex`: chunks in the SQLite file beside
the other tables, keywords in an FTS5 table (``bm25``), vectors searched exactly in memory
(:mod:`app.knowledge.matrix`).

Tables: ``vector_store_chunks`` (text, file, position, attributes as JSON, the float32 vector
as a blob: the durable copy), one FTS5 table per vector store for its keywords
(:mod:`app.knowledge.sqlite_keywords`: Porter stemming, diacritics folded, bm25 over the
store's own statistics) and ``vector_store_index_versions`` (a version per vector store, bumped
by every write in the same transaction).

* **Vectors in memory.** Each vector store's vectors are loaded from the file the first time
  it is searched (measured: ~1.3 s at 100k x 384; a restart keeps everything, nothing to
  rebuild but this) and kept as an immutable snapshot.  A write of this index applies its own
  change to the snapshot (the rows it removed and added, in a worker thread); a search first
  compares the stores' versions with its snapshots' and reloads a store another connection
  (a worker process) changed.
* **Search**: the vector ranking scores every row of the given stores that passes the filter
  (exact top-k, in a worker thread) while, at the same time, the keyword ranking runs in SQLite
  (:class:`app.knowledge.sqlite_keywords.Keywords`: each store's own FTS5 table, bm25 top-k in
  SQL); :func:`app.knowledge.ranking.combine` fuses the two lists of row ids, and only the
  fused top rows' texts are read.  Keyword scores depend on the searched stores' chunks only
  (another tenant's uploads move neither a score nor an order).
* Every write is one transaction (:func:`app.stores.sqlite_db.transaction`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import aiosqlite
import numpy as np
import orjson

from app.knowledge import ranking, sqlite_keywords
from app.knowledge.keywords import STOP_WORDS, keyword_terms
from app.knowledge.matrix import Vectors, as_unit, search
from app.knowledge.vectors import Attributes, Chunk, Hit, Query
from app.stores.sqlite_db import transaction

__all__ = ["STOP_WORDS", "SqliteChunkIndex", "keyword_terms"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vector_store_chunks (
    id INTEGER PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    filename TEXT NOT NULL,
    text TEXT NOT NULL,
    attributes TEXT NOT NULL,
    dims INTEGER NOT NULL,
    vector BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS vector_store_chunks_file
    ON vector_store_chunks (vector_store_id, file_id, chunk_index);
CREATE TABLE IF NOT EXISTS vector_store_index_versions (
    vector_store_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL
);
"""
def _marks(n: int) -> str:
    return ", ".join("?" * n)


class SqliteChunkIndex:
    """:class:`~app.knowledge.vectors.ChunkIndex` on the shared aiosqlite connection ``db``."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self._snapshots: dict[str, Vectors] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._keywords = sqlite_keywords.Keywords(db)

    @classmethod
    async def create(cls, db: aiosqlite.Connection) -> SqliteChunkIndex:
        await db.executescript(_SCHEMA)
        await db.commit()
        async with transaction(db) as tx:
            await sqlite_keywords.migrate(tx)
        return cls(db)

    # --- writes ----------------------------------------------------------------------------

    async def _bump(self, db: aiosqlite.Connection, store: str) -> int:
        """The store's version before this write (0: none yet); bumps it."""
        async with db.execute("SELECT version FROM vector_store_index_versions WHERE vector_store_id = ?",
                              (store,)) as cur:
            row = await cur.fetchone()
        before = 0 if row is None else int(row[0])
        await db.execute("INSERT INTO vector_store_index_versions VALUES (?, ?) ON CONFLICT "
                         "(vector_store_id) DO UPDATE SET version = excluded.version", (store, before + 1))
        return before

    async def _after(self, store: str, before: int, change: Callable[[Vectors], Vectors | None]) -> None:
        """Apply this write's ``change(snapshot)`` to the store's snapshot if it was current
        (else, or when ``change`` gives ``None``, forget it: the next search reloads)."""
        snap = self._snapshots.get(store)
        if snap is None:
            return
        new = None if snap.version != before else await asyncio.to_thread(change, snap)
        if self._snapshots.get(store) is snap:
            if new is None:
                del self._snapshots[store]
            else:
                self._snapshots[store] = new

    async def _delete(self, db: aiosqlite.Connection, store: str, where: str,
                      args: Sequence[Any]) -> list[int]:
        """Delete the store's rows matching ``where`` and their keywords; their ids."""
        async with db.execute(f"DELETE FROM vector_store_chunks WHERE vector_store_id = ? AND {where} "
                              "RETURNING id, text", (store, *args)) as cur:
            rows = [(int(r[0]), str(r[1])) for r in await cur.fetchall()]
        await sqlite_keywords.unindex_rows(db, store, rows)
        return [i for i, _t in rows]

    async def add(self, chunks: Sequence[Chunk]) -> None:
        by_store: dict[str, list[Chunk]] = {}
        for chunk in chunks:
            by_store.setdefault(chunk.vector_store_id, []).append(chunk)
        for store, group in by_store.items():
            await self._add(store, group)

    async def _add(self, store: str, chunks: list[Chunk]) -> None:
        vectors = await asyncio.to_thread(as_unit, [list(c.vector) for c in chunks])
        dims = int(vectors.shape[1])
        files = sorted({c.file_id for c in chunks})
        async with transaction(self._db) as db:
            async with db.execute("SELECT dims FROM vector_store_chunks WHERE vector_store_id = ? AND "
                                  f"file_id NOT IN ({_marks(len(files))}) LIMIT 1", (store, *files)) as cur:
                row = await cur.fetchone()
            if row is not None and int(row[0]) != dims:
                raise ValueError(f"vector store {store} holds {row[0]}-dimensional vectors, not {dims}")
            before = await self._bump(db, store)
            removed = await self._delete(db, store, f"file_id IN ({_marks(len(files))})", files)
            async with db.execute("SELECT COALESCE(MAX(id), 0) FROM vector_store_chunks") as cur:
                row = await cur.fetchone()
            first = int(row[0]) + 1 if row is not None else 1
            ids = list(range(first, first + len(chunks)))
            await db.executemany(
                "INSERT INTO vector_store_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(i, store, c.file_id, c.index, c.filename, c.text, orjson.dumps(dict(c.attributes)).decode(),
                  dims, vectors[n].tobytes()) for n, (i, c) in enumerate(zip(ids, chunks, strict=True))])
            await sqlite_keywords.index_rows(db, store,
                                             [(i, c.text) for i, c in zip(ids, chunks, strict=True)])
        attrs = [dict(c.attributes) for c in chunks]
        await self._after(store, before, lambda s: s.updated(before + 1, removed, ids, vectors, attrs)
                          if s.dims == dims or not len(s) else None)

    async def remove_file(self, vector_store_id: str, file_id: str) -> None:
        async with transaction(self._db) as db:
            before = await self._bump(db, vector_store_id)
            removed = await self._delete(db, vector_store_id, "file_id = ?", (file_id,))
        await self._after(vector_store_id, before, lambda s: s.updated(before + 1, removed))

    async def drop_store(self, vector_store_id: str) -> None:
        async with transaction(self._db) as db:
            await db.execute("DELETE FROM vector_store_chunks WHERE vector_store_id = ?", (vector_store_id,))
            await sqlite_keywords.drop(db, vector_store_id)
            await db.execute("DELETE FROM vector_store_index_versions WHERE vector_store_id = ?",
                             (vector_store_id,))
        self._snapshots.pop(vector_store_id, None)
        self._keywords.forget(vector_store_id)

    async def set_attributes(self, vector_store_id: str, file_id: str, attributes: Attributes) -> None:
        attrs = dict(attributes)
        async with transaction(self._db) as db:
            before = await self._bump(db, vector_store_id)
            async with db.execute("UPDATE vector_store_chunks SET attributes = ? WHERE vector_store_id = ? "
                                  "AND file_id = ? RETURNING id",
                                  (orjson.dumps(attrs).decode(), vector_store_id, file_id)) as cur:
                rows = [int(r[0]) for r in await cur.fetchall()]
        await self._after(vector_store_id, before, lambda s: s.retagged(before + 1, rows, attrs))

    # --- reads -----------------------------------------------------------------------------

    async def chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        async with self._db.execute("SELECT text FROM vector_store_chunks WHERE vector_store_id = ? AND "
                                    "file_id = ? ORDER BY chunk_index", (vector_store_id, file_id)) as cur:
            return [str(r[0]) for r in await cur.fetchall()]

    async def _versions(self, stores: Sequence[str]) -> dict[str, tuple[int, str | None]]:
        """Each store's version and FTS table (stores with no chunks ever are left out)."""
        async with self._db.execute("SELECT v.vector_store_id, v.version, f.n FROM "
                                    "vector_store_index_versions AS v LEFT JOIN vector_store_fts AS f "
                                    "USING (vector_store_id) "
                                    f"WHERE v.vector_store_id IN ({_marks(len(stores))})",
                                    tuple(stores)) as cur:
            return {str(r[0]): (int(r[1]), None if r[2] is None else sqlite_keywords.table(int(r[2])))
                    for r in await cur.fetchall()}

    async def _snapshot(self, store: str, version: int) -> Vectors | None:
        snap = self._snapshots.get(store)
        if snap is not None and snap.version == version:
            return snap
        lock = self._loading.setdefault(store, asyncio.Lock())
        async with lock:
            snap = self._snapshots.get(store)
            if snap is not None and snap.version == version:
                return snap
            async with self._db.execute("SELECT id, attributes, dims, vector FROM vector_store_chunks "
                                        "WHERE vector_store_id = ? ORDER BY id", (store,)) as cur:
                rows = list(await cur.fetchall())
            if not rows:
                self._snapshots.pop(store, None)
                return None
            snap = await asyncio.to_thread(_load, version, rows)
            self._snapshots[store] = snap
            return snap

    async def _vector(self, query: Query, versions: Mapping[str, tuple[int, str | None]],
                      limit: int) -> list[tuple[int, float]]:
        loaded = [await self._snapshot(store, version) for store, (version, _t) in versions.items()]
        snaps = [s for s in loaded if s is not None]
        assert query.vector is not None
        return await asyncio.to_thread(search, snaps, query.vector, limit, query.filters)

    async def search(self, query: Query) -> list[Hit]:
        if not query.vector_store_ids or query.max_num_results <= 0:
            return []
        limit = ranking.depth(query.max_num_results)
        use_vector = query.vector is not None and query.ranker != "keyword"
        use_keyword = query.ranker in ("auto", "hybrid", "keyword") or query.vector is None
        stores = list(dict.fromkeys(query.vector_store_ids))
        versions = await self._versions(stores)
        versions = {s: versions[s] for s in stores if s in versions}  # the query's order
        fts = {s: (name, version) for s, (version, name) in versions.items() if name is not None}
        terms = keyword_terms(query.text)
        # both legs at once: the vectors score in a worker thread while SQLite ranks the keywords
        vector, keyword = await asyncio.gather(
            self._vector(query, versions, limit) if use_vector else _none(),
            self._keywords.search(fts, terms, limit, query.filters) if use_keyword and terms else _none())
        if use_keyword and keyword is None:
            keyword = []
        ranked = ranking.combine(vector, keyword, ranker=query.ranker, limit=query.max_num_results,
                                 score_threshold=query.score_threshold,
                                 embedding_weight=query.embedding_weight, text_weight=query.text_weight)
        return await self._hits(ranked)

    async def _hits(self, ranked: list[tuple[int, float]]) -> list[Hit]:
        if not ranked:
            return []
        sql = ("SELECT id, vector_store_id, file_id, chunk_index, filename, text, attributes "
               f"FROM vector_store_chunks WHERE id IN ({_marks(len(ranked))})")
        async with self._db.execute(sql, tuple(i for i, _s in ranked)) as cur:
            rows = {int(r[0]): r for r in await cur.fetchall()}
        return list(_to_hits(ranked, rows))

    async def close(self) -> None:
        self._snapshots.clear()


async def _none() -> None:
    return None


def _to_hits(ranked: Iterable[tuple[int, float]], rows: Mapping[int, Any]) -> Iterable[Hit]:
    for row_id, score in ranked:
        row = rows.get(row_id)
        if row is not None:  # removed since it was ranked
            yield Hit(str(row[1]), str(row[2]), str(row[4]), score, str(row[5]),
                      orjson.loads(row[6]), int(row[3]))


def _load(version: int, rows: Sequence[Any]) -> Vectors:
    dims = int(rows[0][2])
    blob = b"".join(bytes(r[3]) for r in rows)
    matrix = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dims).copy()
    return Vectors.build(version, dims, [int(r[0]) for r in rows], matrix,
                         [orjson.loads(r[1]) for r in rows])
