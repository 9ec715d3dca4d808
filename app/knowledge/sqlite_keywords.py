"""The keyword half of the embedded index (:mod:`app.knowledge.sqlite_index`): one FTS5 table per
vector store, so bm25's statistics (document frequencies, average length, chunk count) are the
store's own and nothing another tenant uploads moves a score or an order.

* **Tables**: ``vector_store_fts`` maps a vector store to its number ``n`` (never reused:
  ``AUTOINCREMENT``); its chunks' text is indexed in ``vector_store_fts_<n>``, a contentless
  FTS5 table (Porter stemming, diacritics folded) whose rowids are the chunks' ids in
  ``vector_store_chunks``.  The index's writes call :func:`index_rows` / :func:`unindex_rows` /
  :func:`drop` inside their own transaction, so the text and its keywords change together.
  :func:`migrate` turns the former single table shared by every store (and its triggers) into
  per-store tables, once.
* **Search** (:meth:`Keywords.search`): per store, the query's words
  (:func:`app.knowledge.keywords.keyword_terms`) minus those in a large share of the store's
  chunks (:func:`app.knowledge.keywords.selective`; document frequencies counted once per store
  version and word, cached), OR-ed, each quoted (no user text is FTS5 syntax), ranked by
  ``bm25`` inside SQL with a ``LIMIT``.  With a filter, the store's top rows are ranked first
  and the filter checked on them (exact whenever enough pass: they are a prefix of the same
  ranking), else one query joins every match to its row.  Several stores: their rankings are
  merged by score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiosqlite

from app.knowledge.filters import sqlite_where
from app.knowledge.keywords import selective

OVERFETCH_FILTERED = 20  # a filtered search's first try: this many times the rows it needs
MAX_CACHED_WORDS = 10_000
_REGISTRY = """
CREATE TABLE IF NOT EXISTS vector_store_fts (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    vector_store_id TEXT NOT NULL UNIQUE
);
"""
_SHARED = "vector_store_chunks_fts"  # the former table of every store's keywords
_TOKENIZE = "tokenize='porter unicode61 remove_diacritics 2'"


def table(n: int) -> str:
    return f"vector_store_fts_{int(n)}"


def _marks(n: int) -> str:
    return ", ".join("?" * n)


async def _one(db: aiosqlite.Connection, sql: str, args: Sequence[Any] = ()) -> Any:
    async with db.execute(sql, args) as cur:
        row = await cur.fetchone()
    return None if row is None else row[0]


async def tables(db: aiosqlite.Connection, stores: Sequence[str]) -> dict[str, str]:
    """The FTS table of each of ``stores`` that has one."""
    async with db.execute(f"SELECT vector_store_id, n FROM vector_store_fts WHERE vector_store_id IN "
                          f"({_marks(len(stores))})", tuple(stores)) as cur:
        return {str(r[0]): table(int(r[1])) for r in await cur.fetchall()}


async def _ensure(db: aiosqlite.Connection, store: str) -> str:
    n = await _one(db, "SELECT n FROM vector_store_fts WHERE vector_store_id = ?", (store,))
    if n is None:
        n = await _one(db, "INSERT INTO vector_store_fts (vector_store_id) VALUES (?) RETURNING n", (store,))
        await db.execute(f"CREATE VIRTUAL TABLE {table(n)} USING fts5(text, content='', {_TOKENIZE})")
    return table(int(n))


async def index_rows(db: aiosqlite.Connection, store: str, rows: Iterable[tuple[int, str]]) -> None:
    """Index ``(chunk id, text)`` rows of ``store`` (inside the caller's transaction)."""
    name = await _ensure(db, store)
    await db.executemany(f"INSERT INTO {name} (rowid, text) VALUES (?, ?)", list(rows))


async def unindex_rows(db: aiosqlite.Connection, store: str, rows: Sequence[tuple[int, str]]) -> None:
    """Forget ``(chunk id, text)`` rows of ``store``, ``text`` as indexed (contentless FTS5)."""
    if not rows:
        return
    name = (await tables(db, [store])).get(store)
    if name is not None:
        await db.executemany(f"INSERT INTO {name} ({name}, rowid, text) VALUES ('delete', ?, ?)", rows)


async def drop(db: aiosqlite.Connection, store: str) -> None:
    name = (await tables(db, [store])).get(store)
    if name is not None:
        await db.execute(f"DROP TABLE {name}")
        await db.execute("DELETE FROM vector_store_fts WHERE vector_store_id = ?", (store,))


async def migrate(db: aiosqlite.Connection) -> None:
    """The registry; and once, the former shared table's keywords moved to per-store tables
    (inside the caller's transaction)."""
    await db.execute(_REGISTRY)
    if await _one(db, "SELECT 1 FROM sqlite_master WHERE name = ?", (_SHARED,)) is None:
        return
    for trigger in ("ai", "ad", "au"):
        await db.execute(f"DROP TRIGGER IF EXISTS vector_store_chunks_{trigger}")
    await db.execute(f"DROP TABLE {_SHARED}")
    async with db.execute("SELECT DISTINCT vector_store_id FROM vector_store_chunks") as cur:
        stores = [str(r[0]) for r in await cur.fetchall()]
    for store in stores:
        name = await _ensure(db, store)
        await db.execute(f"INSERT INTO {name} (rowid, text) SELECT id, text FROM vector_store_chunks "
                         "WHERE vector_store_id = ?", (store,))


class Keywords:
    """Keyword rankings over per-store FTS5 tables on the connection ``db``, with each store's
    document frequencies cached for its current version."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self._stats: dict[str, tuple[int, int, dict[str, int]]] = {}  # store: (version, chunks, df)

    def forget(self, store: str) -> None:
        self._stats.pop(store, None)

    async def _terms(self, store: str, name: str, version: int, terms: list[str]) -> list[str]:
        cached = self._stats.get(store)
        if cached is None or cached[0] != version or len(cached[2]) > MAX_CACHED_WORDS:
            total = int(await _one(self._db, "SELECT count(*) FROM vector_store_chunks "
                                             "WHERE vector_store_id = ?", (store,)))
            cached = self._stats[store] = (version, total, {})
        _version, total, df = cached
        for term in terms:
            if term not in df:
                df[term] = int(await _one(self._db, f"SELECT count(*) FROM {name} WHERE {name} MATCH ?",
                                          (f'"{term}"',)))
        return selective({t: df[t] for t in terms}, total)

    async def search(self, stores: Mapping[str, tuple[str, int]], terms: list[str], limit: int,
                     filters: Mapping[str, Any] | None) -> list[tuple[int, float]]:
        """The best ``limit`` ``(chunk id, -bm25)`` of the stores (``{store: (FTS table,
        version)}``) passing ``filters``, best first."""
        found: list[tuple[int, float]] = []
        for store, (name, version) in stores.items():
            kept = await self._terms(store, name, version, terms)
            if kept:
                found.extend(await self._store(name, " OR ".join(f'"{t}"' for t in kept), limit, filters))
        found.sort(key=lambda pair: -pair[1])
        return found[:limit]

    async def _store(self, name: str, match: str, limit: int,
                     filters: Mapping[str, Any] | None) -> list[tuple[int, float]]:
        ranked_sql = (f"SELECT rowid, -bm25({name}) FROM {name} WHERE {name} MATCH ? "
                      f"ORDER BY bm25({name}) LIMIT ?")
        fetch = limit if filters is None else limit * OVERFETCH_FILTERED
        async with self._db.execute(ranked_sql, (match, fetch)) as cur:
            ranked = [(int(r[0]), float(r[1])) for r in await cur.fetchall()]
        if filters is None or not ranked:
            return ranked
        where, args = sqlite_where(filters, "c.attributes")
        check = f"SELECT c.id FROM vector_store_chunks AS c WHERE c.id IN ({_marks(len(ranked))}) AND {where}"
        async with self._db.execute(check, (*(i for i, _s in ranked), *args)) as cur:
            passing = {int(r[0]) for r in await cur.fetchall()}
        kept = [pair for pair in ranked if pair[0] in passing]
        if len(kept) >= limit or len(ranked) < fetch:
            return kept[:limit]
        joined = (f"SELECT c.id, -bm25({name}) FROM {name} JOIN vector_store_chunks AS c "
                  f"ON c.id = {name}.rowid WHERE {name} MATCH ? AND {where} ORDER BY bm25({name}) LIMIT ?")
        async with self._db.execute(joined, (match, *args, limit)) as cur:
            return [(int(r[0]), float(r[1])) for r in await cur.fetchall()]
