"""The embedded :class:`~app.knowledge.vectors.ChunkIndex`: chunks in the SQLite file beside
the other tables, keywords in an FTS5 table (``bm25``), vectors searched exactly in memory
(:mod:`app.knowledge.matrix`).

Tables: ``vector_store_chunks`` (text, file, position, attributes as JSON, the float32 vector
as a blob: the durable copy), ``vector_store_chunks_fts`` (FTS5, external content, kept in step
by triggers; Porter stemming, diacritics folded) and ``vector_store_index_versions`` (a version
per vector store, bumped by every write in the same transaction).

* **Vectors in memory.** Each vector store's vectors are loaded from the file the first time
  it is searched (measured: ~1.3 s at 100k x 384; a restart keeps everything, nothing to
  rebuild but this) and kept as an immutable snapshot.  A write of this index applies its own
  change to the snapshot (the rows it removed and added, in a worker thread); a search first
  compares the stores' versions with its snapshots' and reloads a store another connection
  (a worker process) changed.
* **Search**: the vector ranking scores every row of the given stores that passes the filter
  (exact top-k, in a worker thread); the keyword ranking is one FTS5 query (the query's words,
  OR-ed, common English stop words dropped, each a quoted string so no user text is FTS5
  syntax) restricted to the stores and the filter in SQL (:func:`app.knowledge.filters.
  sqlite_where`); :func:`app.knowledge.ranking.combine` fuses them.  bm25's statistics are
  those of the whole table (all stores).
* Every write is one transaction (:func:`app.stores.sqlite_db.transaction`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import aiosqlite
import numpy as np
import orjson

from app.knowledge import ranking
from app.knowledge.filters import sqlite_where
from app.knowledge.matrix import Vectors, as_unit, search
from app.knowledge.vectors import Attributes, Chunk, Hit, Query
from app.stores.sqlite_db import transaction

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
CREATE VIRTUAL TABLE IF NOT EXISTS vector_store_chunks_fts USING fts5(
    text, content='vector_store_chunks', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS vector_store_chunks_ai AFTER INSERT ON vector_store_chunks BEGIN
    INSERT INTO vector_store_chunks_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS vector_store_chunks_ad AFTER DELETE ON vector_store_chunks BEGIN
    INSERT INTO vector_store_chunks_fts (vector_store_chunks_fts, rowid, text)
        VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER IF NOT EXISTS vector_store_chunks_au AFTER UPDATE OF text ON vector_store_chunks BEGIN
    INSERT INTO vector_store_chunks_fts (vector_store_chunks_fts, rowid, text)
        VALUES ('delete', old.id, old.text);
    INSERT INTO vector_store_chunks_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TABLE IF NOT EXISTS vector_store_index_versions (
    vector_store_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL
);
"""
_WORD = re.compile(r"\w+")
MAX_QUERY_WORDS = 64
OVERFETCH = 4  # the keyword ranking's first try: this many times the rows it needs
OVERFETCH_FILTERED = 20  # ... when a filter will drop some
_STOP = ("a an and are as at be but by can do does for from has have how i if in into is it its of on "
         "or that the their there these this to was were what when where which who why will with you your")
STOP_WORDS = frozenset(_STOP.split(" "))


def keyword_terms(text: str) -> list[str]:
    """The words a keyword search looks for: lower-cased, unique, stop words dropped (unless
    that leaves none), at most :data:`MAX_QUERY_WORDS`."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    kept = [w for w in words if w not in STOP_WORDS] or words
    return kept[:MAX_QUERY_WORDS]


def _marks(n: int) -> str:
    return ", ".join("?" * n)


class SqliteChunkIndex:
    """:class:`~app.knowledge.vectors.ChunkIndex` on the shared aiosqlite connection ``db``."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self._snapshots: dict[str, Vectors] = {}
        self._loading: dict[str, asyncio.Lock] = {}

    @classmethod
    async def create(cls, db: aiosqlite.Connection) -> SqliteChunkIndex:
        await db.executescript(_SCHEMA)
        await db.commit()
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

    async def _delete(self, db: aiosqlite.Connection, where: str, args: Sequence[Any]) -> list[int]:
        async with db.execute(f"DELETE FROM vector_store_chunks WHERE {where} RETURNING id", args) as cur:
            return [int(r[0]) for r in await cur.fetchall()]

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
            removed = await self._delete(db, f"vector_store_id = ? AND file_id IN ({_marks(len(files))})",
                                         (store, *files))
            async with db.execute("SELECT COALESCE(MAX(id), 0) FROM vector_store_chunks") as cur:
                row = await cur.fetchone()
            first = int(row[0]) + 1 if row is not None else 1
            ids = list(range(first, first + len(chunks)))
            await db.executemany(
                "INSERT INTO vector_store_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(i, store, c.file_id, c.index, c.filename, c.text, orjson.dumps(dict(c.attributes)).decode(),
                  dims, vectors[n].tobytes()) for n, (i, c) in enumerate(zip(ids, chunks, strict=True))])
        attrs = [dict(c.attributes) for c in chunks]
        await self._after(store, before, lambda s: s.updated(before + 1, removed, ids, vectors, attrs)
                          if s.dims == dims or not len(s) else None)

    async def remove_file(self, vector_store_id: str, file_id: str) -> None:
        async with transaction(self._db) as db:
            before = await self._bump(db, vector_store_id)
            removed = await self._delete(db, "vector_store_id = ? AND file_id = ?",
                                         (vector_store_id, file_id))
        await self._after(vector_store_id, before, lambda s: s.updated(before + 1, removed))

    async def drop_store(self, vector_store_id: str) -> None:
        async with transaction(self._db) as db:
            await self._delete(db, "vector_store_id = ?", (vector_store_id,))
            await db.execute("DELETE FROM vector_store_index_versions WHERE vector_store_id = ?",
                             (vector_store_id,))
        self._snapshots.pop(vector_store_id, None)

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

    async def _versions(self, stores: Sequence[str]) -> dict[str, int]:
        async with self._db.execute("SELECT vector_store_id, version FROM vector_store_index_versions "
                                    f"WHERE vector_store_id IN ({_marks(len(stores))})",
                                    tuple(stores)) as cur:
            return {str(r[0]): int(r[1]) for r in await cur.fetchall()}

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

    async def _keyword(self, query: Query, terms: list[str], limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` chunks by bm25 among the stores' rows passing the filter.  First
        the full-text index alone ranks :data:`OVERFETCH` x ``limit`` rows (more with a
        filter) and the stores and the filter are checked on those only (exact whenever enough
        of them pass: they are a prefix of the same ranking); else one query joins every match
        to its row."""
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        stores = list(dict.fromkeys(query.vector_store_ids))
        where, args = ("1", []) if query.filters is None else sqlite_where(query.filters, "c.attributes")
        fetch = limit * (OVERFETCH if query.filters is None else OVERFETCH_FILTERED)
        first = ("SELECT rowid, -bm25(vector_store_chunks_fts) FROM vector_store_chunks_fts "
                 "WHERE vector_store_chunks_fts MATCH ? ORDER BY bm25(vector_store_chunks_fts) LIMIT ?")
        async with self._db.execute(first, (match, fetch)) as cur:
            ranked = [(int(r[0]), float(r[1])) for r in await cur.fetchall()]
        if not ranked:
            return []
        check = (f"SELECT c.id FROM vector_store_chunks AS c WHERE c.id IN ({_marks(len(ranked))}) "
                 f"AND c.vector_store_id IN ({_marks(len(stores))}) AND {where}")
        async with self._db.execute(check, (*(i for i, _s in ranked), *stores, *args)) as cur:
            passing = {int(r[0]) for r in await cur.fetchall()}
        kept = [pair for pair in ranked if pair[0] in passing]
        if len(kept) >= limit or len(ranked) < fetch:
            return kept[:limit]
        sql = ("SELECT c.id, -bm25(vector_store_chunks_fts) FROM vector_store_chunks_fts "
               "JOIN vector_store_chunks AS c ON c.id = vector_store_chunks_fts.rowid "
               f"WHERE vector_store_chunks_fts MATCH ? AND c.vector_store_id IN ({_marks(len(stores))}) "
               f"AND {where} ORDER BY bm25(vector_store_chunks_fts) LIMIT ?")
        async with self._db.execute(sql, (match, *stores, *args, limit)) as cur:
            return [(int(r[0]), float(r[1])) for r in await cur.fetchall()]

    async def _vector(self, query: Query, limit: int) -> list[tuple[int, float]]:
        stores = list(dict.fromkeys(query.vector_store_ids))
        versions = await self._versions(stores)
        snaps = [s for s in [await self._snapshot(store, versions[store]) for store in stores
                             if store in versions] if s is not None]
        assert query.vector is not None
        return await asyncio.to_thread(search, snaps, query.vector, limit, query.filters)

    async def search(self, query: Query) -> list[Hit]:
        if not query.vector_store_ids or query.max_num_results <= 0:
            return []
        limit = ranking.depth(query.max_num_results)
        use_vector = query.vector is not None and query.ranker != "keyword"
        use_keyword = query.ranker in ("auto", "hybrid", "keyword") or query.vector is None
        vector = await self._vector(query, limit) if use_vector else None
        keyword = await self._keyword(query, keyword_terms(query.text), limit) if use_keyword else None
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
