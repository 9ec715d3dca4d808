"""The file store: what ``/v1/files`` keeps, and the contract every implementation holds.

Implementations: :mod:`.local_files` (the embedded default: metadata in the SQLite file beside
the other tables, bytes in a directory beside it; a ``:memory:`` store keeps them in a
temporary directory removed at close) and :mod:`.postgres_files` (``[store] url``: metadata
and bytes in the database, so every replica sees every file).  ``tests/unit/knowledge/
test_files_contract.py`` runs the same scenarios on each.

Contract:

* **Owners.** Every file belongs to the owner (tenant) that uploaded it.  Every read, list and
  delete names an owner; a file of another owner is indistinguishable from a missing one
  (``None`` / ``False``; the API answers 404), never an error that tells it exists.
* **put** consumes ``chunks`` (an async iterator of bytes, e.g. an upload being parsed) and
  counts them as they come: past ``max_bytes`` it raises :class:`FileTooLarge` at once (the
  rest is never read) and keeps nothing.  When the chunks end, ``describe()`` is called for
  the file's metadata (an upload's other form fields may follow its file part, so they are
  known only then); if it raises, nothing is kept either.  A file is visible whole or not at
  all: the bytes are written aside (a temporary file renamed; rows of one transaction) before
  its metadata row is committed.
* **get** is the metadata (:class:`StoredFile`); **open** is the metadata and the content as
  an async iterator of byte chunks (bounded memory whatever the size).
* **page** lists an owner's files in upload order (``ascending`` or not), optionally of one
  purpose, at most ``limit``, starting just past ``after`` (a file of the same owner, else the
  page is ``None``).
* **delete** removes the metadata and the bytes (``True`` if there was such a file).
* **sweep** deletes every file whose ``expires_at`` is before a time; how many.  Every replica
  may run it at once (PostgreSQL: one at a time, under an advisory lock).
* Failures of the store itself raise (503 ``store_unavailable`` / ``store_busy``), never
  "missing".
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.errors import InvalidRequest
from app.core.ids import random_id

PURPOSES = ("assistants", "batch", "user_data", "vision", "evals", "fine-tune")
# what the gateway writes itself (the Batch API's results), never accepted from an upload
SYSTEM_PURPOSES = ("batch_output", "assistants_output", "fine-tune-results")
CHUNK = 1024 * 1024  # bytes per chunk read back (and per row on PostgreSQL)


class FileTooLarge(InvalidRequest):
    """413: the upload passed ``[files] max_bytes``; nothing of it is kept."""

    status = 413
    code = "file_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"The file is larger than the limit of {limit} bytes.", param="file")


@dataclass(frozen=True, slots=True)
class NewFile:
    """What is known of an upload once its body has been read."""

    filename: str
    purpose: str
    content_type: str
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    owner: str
    created_at: int
    bytes: int
    filename: str
    purpose: str
    content_type: str
    expires_at: int | None = None

    def resource(self) -> dict[str, Any]:
        """The ``file`` object OpenAI's API returns."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": self.created_at,
                "expires_at": self.expires_at, "filename": self.filename, "purpose": self.purpose,
                "status": "processed", "status_details": None}


def new_id() -> str:
    return random_id("file-", 22)


def content_type(declared: str | None, filename: str) -> str:
    """The upload's declared media type, else one guessed from the file name."""
    if declared and declared.strip().lower() not in ("", "application/octet-stream"):
        return declared.strip()[:255]
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    if guessed is None and filename.lower().endswith((".jsonl", ".ndjson")):
        guessed = "application/jsonl"
    return guessed or "application/octet-stream"


Describe = Callable[[], NewFile]


class FileStore(Protocol):
    async def put(self, owner: str, chunks: AsyncIterator[bytes], describe: Describe, *,
                  max_bytes: int) -> StoredFile: ...

    async def get(self, file_id: str, owner: str) -> StoredFile | None: ...

    async def open(self, file_id: str, owner: str,
                   ) -> tuple[StoredFile, AsyncIterator[bytes]] | None: ...

    async def page(self, owner: str, *, purpose: str | None, limit: int, after: str | None,
                   ascending: bool) -> list[StoredFile] | None: ...

    async def delete(self, file_id: str, owner: str) -> bool: ...

    async def sweep(self, expired_before: int) -> int: ...

    async def close(self) -> None: ...


async def read_all(store: FileStore, file_id: str, owner: str, limit: int,
                   ) -> tuple[StoredFile, bytes] | None:
    """A file's metadata and whole content, if it holds at most ``limit`` bytes (else
    :class:`FileTooLarge`): for readers that need the bytes in memory (an ``input_file``)."""
    opened = await store.open(file_id, owner)
    if opened is None:
        return None
    meta, chunks = opened
    if meta.bytes > limit:
        await _close(chunks)
        raise FileTooLarge(limit)
    parts = [chunk async for chunk in chunks]
    return meta, b"".join(parts)


async def _close(chunks: AsyncIterator[bytes]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()
