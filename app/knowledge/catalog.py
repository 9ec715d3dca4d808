"""The vector-store catalog: vector stores, their files and file batches, the statuses and
counters OpenAI reports, and the ingestion queue — and the contract every implementation holds.

Implementations: :mod:`.sqlite_catalog` (tables in the SQLite file beside the other tables;
one process) and :mod:`.postgres_catalog` (``[store] url``; N replicas).  ``tests/unit/
knowledge/test_catalog_contract.py`` runs the same scenarios on each.

Contract:

* **Owners.** Every vector store, vector-store file and batch belongs to the owner (tenant)
  that made it; every read and write names an owner, and another owner's object is missing
  (``None`` / ``False``), never an error that tells it exists.
* **Counters** are computed from the files' rows when read (``file_counts``, ``usage_bytes``:
  the completed files'), never kept apart from them, so they cannot drift.  A store is
  ``in_progress`` while a file is, ``expired`` once :meth:`VectorStoreCatalog.expire` passed
  its ``expires_at``, else ``completed``.  A batch is ``cancelled`` once cancelled, else
  ``in_progress`` while one of its files is, ``failed`` when all failed, else ``completed``.
* **Adding** a file already in the store replaces its row (new attributes, chunking, status
  ``in_progress``, a new job): the re-ingested file's chunks replace the old ones.
* **Jobs.** Each ``in_progress`` vector-store file has one job.  :meth:`claim` hands the
  oldest unleased job (or one whose lease ran out: a dead worker's) to one caller only, with a
  fresh ``token`` and a lease; :meth:`renew` extends it; :meth:`finish` / :meth:`fail` end it
  and set the file's status in one transaction — only while the caller's token still holds the
  job (a job taken over, cancelled or removed meanwhile is not touched: ``False``).  A job
  claimed more than :data:`MAX_ATTEMPTS` times (its worker keeps dying) fails with
  ``server_error``.  Removing a file, deleting or expiring its store, or cancelling its batch
  deletes its job.
* **Embedding space.** A store records the embedding model (and vector length) its vectors
  are made with: given at creation when an embedder is configured, else by the first file
  finished with vectors (:class:`~app.knowledge.vectors.EmbeddingSpace`).
* Failures of the store itself raise (503 ``store_unavailable`` / ``store_busy``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.core.errors import InvalidRequest
from app.knowledge.vectors import Attributes, Chunking, EmbeddingSpace

FileStatus = Literal["in_progress", "completed", "failed", "cancelled"]
FILE_STATUSES: tuple[FileStatus, ...] = ("in_progress", "completed", "failed", "cancelled")
ErrorCode = Literal["server_error", "unsupported_file", "invalid_file"]
MAX_ATTEMPTS = 3
LEASE_SECONDS = 60.0  # a claimed job's lease; its worker renews it every third of it
TOUCH_EVERY = 60  # last_active_at moves at most once a minute (a search is not a write each time)
DAY = 86400
MAX_ATTRIBUTES, MAX_KEY, MAX_VALUE = 16, 64, 512  # OpenAI's bounds of a file's attributes


@dataclass(frozen=True, slots=True)
class FileCounts:
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.in_progress + self.completed + self.failed + self.cancelled

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> FileCounts:
        return cls(*(int(counts.get(s, 0)) for s in FILE_STATUSES))

    def resource(self) -> dict[str, int]:
        return {"in_progress": self.in_progress, "completed": self.completed, "failed": self.failed,
                "cancelled": self.cancelled, "total": self.total}


@dataclass(frozen=True, slots=True)
class NewStore:
    owner: str
    name: str
    metadata: Mapping[str, str] | None = None
    expires_after_days: int | None = None
    description: str | None = None
    space: EmbeddingSpace | None = None  # the embedder's, if one is configured


@dataclass(frozen=True, slots=True)
class StoreChanges:
    """An update: only the fields given (``set_*`` True) change; ``None`` values clear."""

    name: str | None = None
    set_name: bool = False
    metadata: Mapping[str, str] | None = None
    set_metadata: bool = False
    expires_after_days: int | None = None
    set_expiry: bool = False


@dataclass(frozen=True, slots=True)
class StoreRecord:
    id: str
    owner: str
    created_at: int
    name: str
    metadata: Mapping[str, str] | None
    expires_after_days: int | None
    expires_at: int | None
    last_active_at: int
    expired: bool
    counts: FileCounts
    usage_bytes: int
    space: EmbeddingSpace | None = None  # what its vectors are made with (None: none yet)

    @property
    def status(self) -> str:
        return "expired" if self.expired else "in_progress" if self.counts.in_progress else "completed"

    def resource(self) -> dict[str, Any]:
        """OpenAI's ``vector_store`` object."""
        return {"id": self.id, "object": "vector_store", "created_at": self.created_at, "name": self.name,
                "usage_bytes": self.usage_bytes, "file_counts": self.counts.resource(),
                "status": self.status, "last_active_at": self.last_active_at,
                "metadata": dict(self.metadata) if self.metadata is not None else {},
                "expires_after": None if self.expires_after_days is None else
                {"anchor": "last_active_at", "days": self.expires_after_days},
                "expires_at": self.expires_at}


@dataclass(frozen=True, slots=True)
class NewEntry:
    """A file to add to a vector store (its owner checked already)."""

    file_id: str
    filename: str
    chunking: Chunking
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FileRecord:
    vector_store_id: str
    file_id: str
    owner: str
    created_at: int
    status: FileStatus
    usage_bytes: int
    last_error: tuple[str, str] | None
    attributes: Attributes
    chunking: Chunking
    filename: str

    def resource(self) -> dict[str, Any]:
        """OpenAI's ``vector_store.file`` object (the chunking as applied: ``static``)."""
        return {"id": self.file_id, "object": "vector_store.file", "created_at": self.created_at,
                "usage_bytes": self.usage_bytes, "vector_store_id": self.vector_store_id,
                "status": self.status,
                "last_error": None if self.last_error is None else
                {"code": self.last_error[0], "message": self.last_error[1]},
                "attributes": dict(self.attributes),
                "chunking_strategy": {"type": "static", "static": {
                    "max_chunk_size_tokens": self.chunking.max_chunk_size_tokens,
                    "chunk_overlap_tokens": self.chunking.chunk_overlap_tokens}}}


@dataclass(frozen=True, slots=True)
class BatchRecord:
    id: str
    vector_store_id: str
    owner: str
    created_at: int
    cancelled: bool
    counts: FileCounts

    @property
    def status(self) -> str:
        if self.cancelled:
            return "cancelled"
        if self.counts.in_progress:
            return "in_progress"
        return "failed" if self.counts.total and self.counts.failed == self.counts.total else "completed"

    def resource(self) -> dict[str, Any]:
        """OpenAI's ``vector_store.files_batch`` object."""
        return {"id": self.id, "object": "vector_store.files_batch", "created_at": self.created_at,
                "vector_store_id": self.vector_store_id, "status": self.status,
                "file_counts": self.counts.resource()}


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed ingestion job: what the worker needs, and its claim's ``token``."""

    vector_store_id: str
    file_id: str
    owner: str
    token: str
    attempts: int
    filename: str
    chunking: Chunking
    attributes: Attributes
    space: EmbeddingSpace | None = None  # the store's


@dataclass(frozen=True, slots=True)
class Page:
    """A list page's cursor: ``after`` / ``before`` an id (at most one), order, size."""

    limit: int = 20
    after: str | None = None
    before: str | None = None
    ascending: bool = False


class VectorStoreCatalog(Protocol):
    async def create_store(self, store: NewStore, entries: Sequence[NewEntry], now: int) -> StoreRecord: ...

    async def get_store(self, owner: str, store_id: str) -> StoreRecord | None: ...

    async def page_stores(self, owner: str, page: Page) -> list[StoreRecord] | None:
        """``limit`` of the owner's stores past the cursor (``None``: no such cursor)."""
        ...

    async def update_store(self, owner: str, store_id: str, changes: StoreChanges,
                           now: int) -> StoreRecord | None: ...

    async def delete_store(self, owner: str, store_id: str) -> bool: ...

    async def add_files(self, owner: str, store_id: str, entries: Sequence[NewEntry], now: int,
                        batch_id: str | None = None) -> list[FileRecord] | None:
        """Add (or replace) files, each with a job; with ``batch_id``, as a new batch."""
        ...

    async def get_file(self, owner: str, store_id: str, file_id: str) -> FileRecord | None: ...

    async def page_files(self, owner: str, store_id: str, page: Page, *, status: str | None = None,
                         batch_id: str | None = None) -> list[FileRecord] | None: ...

    async def set_attributes(self, owner: str, store_id: str, file_id: str,
                             attributes: Attributes) -> FileRecord | None: ...

    async def remove_file(self, owner: str, store_id: str, file_id: str) -> bool: ...

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord | None: ...

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord | None:
        """Cancel a batch's files still in progress (their jobs deleted)."""
        ...

    async def touch(self, owner: str, store_ids: Sequence[str], now: int) -> None:
        """Mark the stores active (``last_active_at``, and ``expires_at`` after it)."""
        ...

    async def expire(self, now: int) -> list[str]:
        """Mark ``expired`` the stores whose ``expires_at`` passed (their in-progress files
        cancelled, jobs deleted); their ids (the caller drops their chunks)."""
        ...

    async def claim(self, now: float, lease: float = LEASE_SECONDS) -> Job | None: ...

    async def renew(self, job: Job, now: float, lease: float = LEASE_SECONDS) -> bool: ...

    async def finish(self, job: Job, usage_bytes: int, space: EmbeddingSpace | None = None) -> bool:
        """Complete the file; ``space``: what its vectors were made with, recorded with the
        store if it has none recorded yet."""
        ...

    async def fail(self, job: Job, code: ErrorCode, message: str) -> bool: ...

    async def release(self, job: Job) -> None:
        """Give a job back unfinished (shutting down): the next claim takes it at once."""
        ...

    async def close(self) -> None: ...


def chunking_json(chunking: Chunking) -> dict[str, Any]:
    return {"max": chunking.max_chunk_size_tokens, "overlap": chunking.chunk_overlap_tokens,
            "kind": chunking.kind}


def chunking_of(value: Mapping[str, Any]) -> Chunking:
    return Chunking(int(value["max"]), int(value["overlap"]),
                    "static" if value.get("kind") == "static" else "auto")


def check_attributes(value: Any, param: str = "attributes") -> dict[str, str | float | bool]:
    """OpenAI's ``attributes``: at most 16 keys of at most 64 characters; values strings of at
    most 512 characters, numbers or booleans (``None``: none)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"Invalid type for '{param}': expected an object.", param=param,
                             code="invalid_type")
    if len(value) > MAX_ATTRIBUTES:
        raise InvalidRequest(f"Invalid '{param}': at most {MAX_ATTRIBUTES} keys, not {len(value)}.",
                             param=param, code="invalid_value")
    out: dict[str, str | float | bool] = {}
    for key, item in value.items():
        where = f"{param}.{str(key)[:64]}"
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
            raise InvalidRequest(f"Invalid '{param}': keys are 1 to {MAX_KEY} characters.", param=param,
                                 code="invalid_value")
        if isinstance(item, str):
            if len(item) > MAX_VALUE:
                raise InvalidRequest(f"Invalid '{where}': at most {MAX_VALUE} characters.", param=where,
                                     code="invalid_value")
        elif not isinstance(item, bool | int | float) or not math.isfinite(item):
            raise InvalidRequest(f"Invalid type for '{where}': a string, a number or a boolean.",
                                 param=where, code="invalid_type")
        out[key] = item
    return out
