"""Test-only stand-ins for the vector-store seams of :mod:`app.knowledge.vectors`.

* :class:`FakeHashEmbedder` — a deterministic **fake** embedder for tests: each word of a text
  is hashed into one of :data:`FAKE_DIMENSIONS` buckets, the counts L2-normalised.  Texts
  sharing words are near; it knows nothing of meaning and is never an embedding model.  It
  records every call (``calls``) and can be told to fail (``fail_with``) or to wait
  (``gate``: an :class:`asyncio.Event` each call awaits).
* :class:`MemoryChunkIndex` — a :class:`~app.knowledge.vectors.ChunkIndex` in a dict: vector
  ranking by cosine (mapped to [0, 1]), keyword ranking by the share of query words a chunk
  holds, ``auto`` / ``hybrid`` the mean of both; OpenAI's comparison / compound filters
  evaluated in Python (eq, ne, gt, gte, lt, lte, in, nin; and, or).  Good enough to test the
  parts around an index, not a ranking to measure.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from app.knowledge.vectors import Attributes, Chunk, Hit, Query

FAKE_DIMENSIONS = 64
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


class FakeHashEmbedder:
    """A deterministic fake :class:`~app.knowledge.vectors.Embedder` (hashed bag of words)."""

    def __init__(self, *, max_input_tokens: int = 8192, model: str = "fake-hash-embedder") -> None:
        self.model = model
        self.dimensions: int | None = None
        self.max_input_tokens = max_input_tokens
        self.calls: list[list[str]] = []
        self.fail_with: BaseException | None = None
        self.gate: asyncio.Event | None = None

    def vector(self, text: str) -> list[float]:
        counts = [0.0] * FAKE_DIMENSIONS
        for word in words(text):
            counts[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % FAKE_DIMENSIONS] += 1
        norm = math.sqrt(sum(c * c for c in counts)) or 1.0
        return [c / norm for c in counts]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(0)  # a real embedder waits on its upstream: the loop runs meanwhile
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.dimensions = FAKE_DIMENSIONS
        return [self.vector(t) for t in texts]


def _compare(op: str, have: Any, want: Any) -> bool:
    if op in ("in", "nin"):
        found = isinstance(want, list) and have in want
        return found if op == "in" else not found
    if op == "eq":
        return bool(have == want)
    if op == "ne":
        return bool(have != want)
    if have is None or isinstance(have, bool) != isinstance(want, bool):
        return False
    try:
        return bool({"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}[op])
    except TypeError:
        return False


def matches(filters: Mapping[str, Any] | None, attributes: Attributes) -> bool:
    """OpenAI's attribute filter on one file's attributes (a missing key never matches)."""
    if not filters:
        return True
    kind = filters.get("type")
    if kind in ("and", "or"):
        found = [matches(f, attributes) for f in filters.get("filters", [])]
        return all(found) if kind == "and" else any(found)
    key = str(filters.get("key"))
    if key not in attributes:
        return kind == "ne" or kind == "nin"
    return _compare(str(kind), attributes[key], filters.get("value"))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if not a or not b or len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class MemoryChunkIndex:
    """An in-memory :class:`~app.knowledge.vectors.ChunkIndex` for tests."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], list[Chunk]] = {}  # (store, file) -> its chunks in order
        self.searches: list[Query] = []
        self.closed = False

    async def add(self, chunks: Sequence[Chunk]) -> None:
        files: dict[tuple[str, str], list[Chunk]] = {}
        for chunk in chunks:
            files.setdefault((chunk.vector_store_id, chunk.file_id), []).append(chunk)
        for key, found in files.items():
            self.stored[key] = sorted(found, key=lambda c: c.index)
        await asyncio.sleep(0)

    async def remove_file(self, vector_store_id: str, file_id: str) -> None:
        self.stored.pop((vector_store_id, file_id), None)

    async def drop_store(self, vector_store_id: str) -> None:
        for key in [k for k in self.stored if k[0] == vector_store_id]:
            del self.stored[key]

    async def set_attributes(self, vector_store_id: str, file_id: str, attributes: Attributes) -> None:
        key = (vector_store_id, file_id)
        if key in self.stored:
            self.stored[key] = [Chunk(c.vector_store_id, c.file_id, c.index, c.text, c.vector, c.filename,
                                      dict(attributes)) for c in self.stored[key]]

    async def chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        return [c.text for c in self.stored.get((vector_store_id, file_id), [])]

    async def search(self, query: Query) -> list[Hit]:
        self.searches.append(query)
        wanted = set(words(query.text))
        hits: list[Hit] = []
        for (vs, _), found in self.stored.items():
            if vs not in query.vector_store_ids:
                continue
            for c in found:
                if not matches(query.filters, c.attributes):
                    continue
                keyword = len(wanted & set(words(c.text))) / len(wanted) if wanted else 0.0
                vector = (_cosine(query.vector, c.vector) + 1) / 2 if query.vector is not None else None
                if query.ranker == "keyword" or vector is None:
                    score = keyword
                elif query.ranker in ("vector", "none"):
                    score = vector
                else:
                    score = (keyword + vector) / 2
                if score <= 0 or score < query.score_threshold:
                    continue
                hits.append(Hit(vs, c.file_id, c.filename, score, c.text, dict(c.attributes), c.index))
        hits.sort(key=lambda h: (-h.score, h.file_id, h.chunk_index))
        return hits[:query.max_num_results]

    async def close(self) -> None:
        self.closed = True


class FileSearchKnowledge:
    """A fake of the ``Knowledge`` facade's search for the ``file_search`` tool (K3): vector
    stores owned by keys (tenants), files added as chunk texts straight into a
    :class:`MemoryChunkIndex` through a :class:`FakeHashEmbedder`.  Its ``search`` and
    ``check_search`` keep the facade's contract (:mod:`app.tools.file_search`): a store the
    owner does not have — missing or another owner's — raises the same ``NotFound``; filters
    and ranking options are validated as the API validates them.  ``searches`` records every
    ``(owner, vector_store_ids, query)``; ``fail_with`` makes the next searches raise."""

    def __init__(self) -> None:
        self.index = MemoryChunkIndex()
        self.embedder = FakeHashEmbedder()
        self.owners: dict[str, str] = {}  # vector store id -> owner
        self.searches: list[tuple[str, tuple[str, ...], str]] = []
        self.fail_with: BaseException | None = None

    async def add(self, owner: str, store_id: str, file_id: str, filename: str, texts: Sequence[str],
                  attributes: Attributes | None = None) -> None:
        self.owners.setdefault(store_id, owner)
        vectors = await self.embedder.embed(list(texts))
        await self.index.add([Chunk(store_id, file_id, i, text, vector, filename, dict(attributes or {}))
                              for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))])

    def _owned(self, owner: str, vector_store_ids: Sequence[str]) -> None:
        from app.core.errors import NotFound

        for i, store_id in enumerate(vector_store_ids):  # as app/knowledge/service.py names them
            if self.owners.get(store_id) != owner:
                raise NotFound(f"No vector store found with id {store_id!r}.", param="vector_store_id"
                               if len(vector_store_ids) == 1 else f"vector_store_ids[{i}]")

    async def check_search(self, owner: str, vector_store_ids: Sequence[str], *,
                           filters: Mapping[str, Any] | None,
                           ranking_options: Mapping[str, Any] | None) -> None:
        from app.knowledge.filters import parse
        from app.knowledge.ranking import parse_ranking_options

        self._owned(owner, vector_store_ids)
        if filters is not None:
            parse(filters)
        parse_ranking_options(ranking_options)

    async def search(self, owner: str, vector_store_ids: Sequence[str], query: str, *,
                     max_num_results: int, filters: Mapping[str, Any] | None,
                     ranking_options: Mapping[str, Any] | None) -> list[Hit]:
        from app.knowledge.ranking import parse_ranking_options

        self.searches.append((owner, tuple(vector_store_ids), query))
        if self.fail_with is not None:
            raise self.fail_with
        await self.check_search(owner, vector_store_ids, filters=filters, ranking_options=ranking_options)
        ranking = parse_ranking_options(ranking_options)
        vector = (await self.embedder.embed([query]))[0]
        return await self.index.search(Query(owner, tuple(vector_store_ids), query, vector, max_num_results,
                                             filters, ranking.ranker, ranking.score_threshold))
