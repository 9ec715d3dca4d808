"""Vector stores: the shared nouns of ``/v1/vector_stores`` and ``file_search``, and the three
seams the parts meet at.

The parts (each its own module, each knowing only this one and the ones below it):

* **metadata and jobs** — vector stores, their files and file batches, statuses and counters
  as OpenAI reports them, and the ingestion queue (a job per vector-store file, claimed by one
  replica, resumable after a restart): :class:`VectorStoreCatalog` (SQLite and PostgreSQL
  implementations beside the file store).
* **the index** — chunks with their vectors, text and attributes; vector, keyword and hybrid
  search with OpenAI's attribute filters: :class:`ChunkIndex`.
* **embeddings** — a model of the config that serves ``/v1/embeddings``: :class:`Embedder`.

``file_search`` (the hosted tool) and ``POST /v1/vector_stores/{id}/search`` both go through
:func:`app.knowledge.search.search` (query → embedding → :meth:`ChunkIndex.search` over the
caller's stores → ranked :class:`Hit` s), so the API and the tool rank the same way.

Ownership as everywhere: every read names an owner; another owner's vector store is missing
(``None``), never an error that tells it exists.  Failures of a store raise
(``store_unavailable`` / ``store_busy``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.core.errors import GatewayError
from app.core.ids import random_id

AttributeValue = str | float | bool
Attributes = Mapping[str, AttributeValue]  # OpenAI: at most 16 keys, strings <= 512 chars
Ranker = Literal["auto", "hybrid", "vector", "keyword", "none"]  # "none"/"vector": vector only


def new_store_id() -> str:
    return random_id("vs_", 24)


def new_batch_id() -> str:
    return random_id("vsfb_", 24)


@dataclass(frozen=True, slots=True)
class Chunking:
    """OpenAI's ``static`` strategy (``auto`` is 800 / 400, capped for the embedding model)."""

    max_chunk_size_tokens: int = 800
    chunk_overlap_tokens: int = 400
    kind: Literal["auto", "static"] = "auto"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One indexed piece of a file: its text, where it is in the file, and its vector."""

    vector_store_id: str
    file_id: str
    index: int  # position within the file (0, 1, ...)
    text: str
    vector: Sequence[float]
    filename: str = ""
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: OpenAI's ``vector_store.search_results.page`` row / a
    ``file_search_call`` result (``score`` in [0, 1], higher is better)."""

    vector_store_id: str
    file_id: str
    filename: str
    score: float
    text: str
    attributes: Attributes = field(default_factory=dict)
    chunk_index: int = 0


@dataclass(frozen=True, slots=True)
class Query:
    """What a search asks of the index; ``filters`` is OpenAI's comparison / compound filter
    object, already validated (:func:`app.knowledge.filters.parse`)."""

    owner: str
    vector_store_ids: Sequence[str]
    text: str
    vector: Sequence[float] | None  # None: keyword ranking only (no embedder answered)
    max_num_results: int = 10
    filters: Mapping[str, Any] | None = None
    ranker: Ranker = "auto"
    score_threshold: float = 0.0
    # the file_search tool's ranking_options.hybrid_search (reciprocal rank fusion weights)
    embedding_weight: float = 1.0
    text_weight: float = 1.0


class ChunkIndex(Protocol):
    """Chunks of every vector store of one store (SQLite file or PostgreSQL database).

    * ``add`` replaces a file's chunks in a store (a re-ingested file never doubles).
    * ``search`` ranks within the given stores only (the caller has checked they are the
      owner's); ``auto`` / ``hybrid`` fuse vector and keyword rankings (reciprocal rank
      fusion); ``vector`` / ``none`` are the plain vector ranking; ``keyword`` is full-text only.
    * ``set_attributes`` re-tags a file's chunks (attributes are filterable at once).
    """

    async def add(self, chunks: Sequence[Chunk]) -> None: ...

    async def remove_file(self, vector_store_id: str, file_id: str) -> None: ...

    async def drop_store(self, vector_store_id: str) -> None: ...

    async def set_attributes(self, vector_store_id: str, file_id: str,
                             attributes: Attributes) -> None: ...

    async def chunks(self, vector_store_id: str, file_id: str) -> list[str]:
        """A file's chunk texts in order (``GET .../files/{id}/content``)."""
        ...

    async def search(self, query: Query) -> list[Hit]: ...

    async def close(self) -> None: ...


class Embedder(Protocol):
    """A configured embedding model.  ``embed`` returns one L2-normalised vector per text, in
    order; it batches, retries transient upstream failures, and raises the gateway's upstream
    errors when it cannot.  ``max_input_tokens`` bounds a chunk (chunking caps OpenAI's
    ``auto`` 800 tokens to it)."""

    model: str
    dimensions: int | None  # known after the first call
    max_input_tokens: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@dataclass(frozen=True, slots=True)
class EmbeddingSpace:
    """What a vector store's vectors were made with (K2): the configured model's name and their
    length.  The catalog records it with the store (``dimensions`` once the first vector is
    made); :func:`app.knowledge.embed.check_space` refuses a search or an ingestion with
    another model (:class:`EmbeddingModelChanged`): its vectors would not compare."""

    model: str
    dimensions: int | None = None


class EmbeddingModelChanged(GatewayError):
    """A vector store made with one embedding model, used while another is configured: 409
    ``embedding_model_changed`` (the request is fine; the store and the config disagree)."""

    status = 409
    type = "invalid_request_error"
    code = "embedding_model_changed"
    retryable = False
