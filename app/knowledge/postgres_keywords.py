"""The keyword half of the PostgreSQL chunk index (:mod:`app.knowledge.postgres_index`): what it
stores, how it follows the chunks, and how it ranks, with every vector store's words kept apart.

* **A term per (vector store, word)**: ``vector_store_terms`` gives each English lexeme of a
  store's chunks (``to_tsvector('english', text)``, the wide chunk row's ``tsv``) a number
  ``term`` of its own and keeps its document frequency ``df`` (how many of the store's chunks
  hold it), updated by every add, replace and removal.  The same word in two stores is two
  terms.
* **The narrow table** ``vector_store_chunk_terms`` (chunk id, store, a copy of the chunk's
  ``attributes``, and the chunk's tsvector with each lexeme renamed ``t<term>`` — the same
  positions, so ``ts_rank`` gives exactly the value it gives on the English tsvector) under a
  GIN index with ``fastupdate = off`` (no pending list every search would scan).  Its index's
  posting lists are per store: a search reads only the searched stores' postings, so neither
  its result nor its work (index entries, heap pages) grows with another tenant's chunks; the
  document frequencies are read from ``vector_store_terms`` (no count at query time).
* **Ranking** (:func:`plan`): the query's words (:func:`app.knowledge.keywords.keyword_terms`),
  each turned into its lexemes by PostgreSQL (``to_tsvector``: the text is a document, never
  query syntax), looked up in the searched stores' terms; the words kept
  (:func:`app.knowledge.keywords.selective`) weigh their BM25 idf, and a chunk's score is the
  sum over the words it holds of idf x ``ts_rank(tsv, word, 1)``, in one GIN-driven scan of
  the narrow table (the tsqueries are built from term numbers only).  A word of several
  lexemes (``max_num_results``) matches a chunk holding all of them, as ``plainto_tsquery``
  does, and its document frequency is counted on the store's postings.  A filter is checked
  on the narrow rows' ``attributes`` copy (:func:`app.knowledge.filters.postgres_where`, the
  same expression as on the wide rows).
* **Migration** (:func:`migrate`, under the index's migration lock): a database from before
  (the wide table's GIN index, the former ``vector_store_chunk_words`` table, or neither) gets
  the two tables filled from its chunks once, then the former table and index are dropped.
"""

from __future__ import annotations

from typing import Any

from app.knowledge.filters import Filter, postgres_where
from app.knowledge.keywords import idf, keyword_terms, selective

_DDL = """
CREATE TABLE vector_store_terms (
    vector_store_id TEXT NOT NULL,
    lexeme TEXT NOT NULL,
    term BIGINT GENERATED ALWAYS AS IDENTITY,
    df INT NOT NULL,
    PRIMARY KEY (vector_store_id, lexeme)
);
CREATE TABLE vector_store_chunk_terms (
    id BIGINT PRIMARY KEY REFERENCES vector_store_chunks (id) ON DELETE CASCADE,
    vector_store_id TEXT NOT NULL,
    attributes JSONB NOT NULL,
    tsv tsvector NOT NULL
);
-- kept in the row (compressed if large): ranking a match reads one heap tuple, no TOAST
ALTER TABLE vector_store_chunk_terms ALTER COLUMN tsv SET STORAGE MAIN;
"""
# built after the backfill (one bulk build); no pending list: a search never scans recent inserts
_GIN = ("CREATE INDEX vector_store_chunk_terms_tsv ON vector_store_chunk_terms USING GIN (tsv) "
        "WITH (fastupdate = off)")
_FORMER = ("DROP TABLE IF EXISTS vector_store_chunk_words", "DROP INDEX IF EXISTS vector_store_chunks_tsv")
# the document frequencies of the chunks ``c`` selected by {where}, added to the stores' terms
# (sorted: concurrent first adds to one store lock the same rows in the same order)
_COUNT = """
INSERT INTO vector_store_terms AS t (vector_store_id, lexeme, df)
SELECT c.vector_store_id, u.lexeme, count(*) FROM vector_store_chunks AS c, unnest(c.tsv) AS u
WHERE {where} GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (vector_store_id, lexeme) DO UPDATE SET df = t.df + excluded.df
"""
# the narrow rows of the chunks ``c`` selected by {where}: each lexeme renamed to its term
_NARROW = """
INSERT INTO vector_store_chunk_terms (id, vector_store_id, attributes, tsv)
SELECT c.id, c.vector_store_id, c.attributes, COALESCE((
    SELECT string_agg('t' || t.term || COALESCE(':' || array_to_string(u.positions, ','), ''), ' ')
    FROM unnest(c.tsv) AS u JOIN vector_store_terms AS t
        ON t.vector_store_id = c.vector_store_id AND t.lexeme = u.lexeme), '')::tsvector
FROM vector_store_chunks AS c WHERE {where}
"""
_FILES = "c.vector_store_id = $1 AND c.file_id = ANY($2::text[])"
# before a store's chunks of these files are deleted: their words no longer counted
_UNCOUNT = f"""
UPDATE vector_store_terms AS t SET df = t.df - d.n FROM (
    SELECT u.lexeme, count(*) AS n FROM vector_store_chunks AS c, unnest(c.tsv) AS u
    WHERE {_FILES} GROUP BY u.lexeme) AS d
WHERE t.vector_store_id = $1 AND t.lexeme = d.lexeme
"""
# each query word's lexemes, and each lexeme's term and df in each searched store
_LOOKUP = """
SELECT u.o, l.lexeme, s.vector_store_id, s.term, s.df,
       (SELECT COALESCE(sum(n), 0) FROM vector_store_chunk_counts WHERE vector_store_id = ANY($1::text[]))
FROM unnest($2::text[]) WITH ORDINALITY AS u(w, o)
CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english', u.w))) AS l(lexeme)
LEFT JOIN vector_store_terms AS s ON s.vector_store_id = ANY($1::text[]) AND s.lexeme = l.lexeme
"""


async def migrate(conn: Any) -> None:
    """The tables (and their one backfill from the chunks) if the database has not got them;
    run inside the index's migration transaction, under its lock."""
    if await conn.fetchval("SELECT to_regclass('vector_store_chunk_terms')") is not None:
        return
    await conn.execute(_DDL)
    await conn.execute(_COUNT.format(where="TRUE"))
    await conn.execute(_NARROW.format(where="TRUE"))
    await conn.execute(_GIN)
    for statement in _FORMER:
        await conn.execute(statement)
    await conn.execute("ANALYZE vector_store_terms, vector_store_chunk_terms")


async def index_files(conn: Any, store: str, files: list[str]) -> None:
    """After a store's chunks of ``files`` were inserted (same transaction)."""
    await conn.execute(_COUNT.format(where=_FILES), store, files)
    await conn.execute(_NARROW.format(where=_FILES), store, files)


async def unindex_files(conn: Any, store: str, files: list[str]) -> None:
    """Before a store's chunks of ``files`` are deleted (same transaction; their narrow rows go
    with them, ``ON DELETE CASCADE``)."""
    await conn.execute(_UNCOUNT, store, files)


async def drop_store(conn: Any, store: str) -> None:
    await conn.execute("DELETE FROM vector_store_terms WHERE vector_store_id = $1", store)


async def set_attributes(conn: Any, store: str, file_id: str, attributes: str) -> None:
    """The narrow rows' copy of a file's new ``attributes`` (jsonb text)."""
    await conn.execute("UPDATE vector_store_chunk_terms SET attributes = $3::jsonb WHERE id IN (SELECT id "
                       "FROM vector_store_chunks WHERE vector_store_id = $1 AND file_id = $2)",
                       store, file_id, attributes)


def _tsquery(terms: list[int]) -> str:
    """A tsquery of term numbers only (``t12 & t13``): no user text in it."""
    return " & ".join(f"t{int(t)}" for t in terms)


async def plan(conn: Any, text: str, stores: list[str], limit: int,
               filters: Filter | None) -> tuple[str, list[Any]] | None:
    """The ranking statement and its arguments (``None``: no word of the query can match)."""
    words = keyword_terms(text)
    if not words:
        return None
    lexemes: dict[int, list[str]] = {}
    terms: dict[tuple[int, str], dict[str, tuple[int, int]]] = {}  # (word, store): lexeme: (term, df)
    total = 0
    for o, lexeme, store, term, df, n in await conn.fetch(_LOOKUP, stores, words):
        total = int(n)
        known = lexemes.setdefault(int(o) - 1, [])
        if lexeme not in known:
            known.append(str(lexeme))
        if store is not None:
            terms.setdefault((int(o) - 1, str(store)), {})[str(lexeme)] = (int(term), int(df))
    items: dict[str, list[tuple[str, bool]]] = {}  # word: (tsquery, several lexemes) per store
    df = dict.fromkeys(words, 0)
    for (o, store), found in terms.items():
        wanted = lexemes[o]
        if len(found) < len(wanted) or any(found[lx][1] <= 0 for lx in wanted):
            continue  # a lexeme the store's chunks never hold: the word matches none of them
        query = _tsquery([found[lx][0] for lx in wanted])
        if len(wanted) == 1:
            df[words[o]] += found[wanted[0]][1]
        else:  # chunks holding all the lexemes: counted on the store's own postings
            df[words[o]] += int(await conn.fetchval(
                "SELECT count(*) FROM vector_store_chunk_terms WHERE vector_store_id = $1 AND "
                "tsv @@ $2::tsquery", store, query))
        items.setdefault(words[o], []).append((query, len(wanted) > 1))
    weights = {w: idf(df[w], total) for w in selective(df, total)}
    scored = [(weights[w], q, several) for w in weights for q, several in items[w]]
    if not scored:
        return None
    parts: list[str] = []
    args: list[Any] = []
    for i, (weight, query, several) in enumerate(scored):
        rank = f"ts_rank(tsv, ${5 + 2 * i}::tsquery, 1)"
        if several:  # ts_rank of an AND query is not 0 for a chunk holding only some lexemes
            rank = f"CASE WHEN tsv @@ ${5 + 2 * i}::tsquery THEN {rank} ELSE 0 END"
        parts.append(f"${4 + 2 * i}::float8 * {rank}")
        args += [weight, query]
    where, more = ("TRUE", []) if filters is None else postgres_where(filters, "attributes", 4 + len(args))
    any_word = " | ".join(f"({q})" for _w, q, _s in scored)
    sql = (f"SELECT id, {' + '.join(parts)} AS r FROM vector_store_chunk_terms WHERE "
           f"vector_store_id = ANY($1::text[]) AND tsv @@ $3::tsquery AND {where} "
           "ORDER BY r DESC, id LIMIT $2")
    return sql, [stores, limit, any_word, *args, *more]


async def rank(conn: Any, text: str, stores: list[str], limit: int,
               filters: Filter | None) -> list[tuple[int, float]]:
    """``(chunk id, score)`` best first, at most ``limit`` (see the module's doc)."""
    planned = await plan(conn, text, stores, limit, filters)
    if planned is None:
        return []
    rows = await conn.fetch(planned[0], *planned[1])
    return [(int(r[0]), float(r[1])) for r in rows]
