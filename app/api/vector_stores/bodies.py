"""Wire models of the Vector Stores API's request bodies, as the OpenAI SDK sends them.

Shapes and types are checked here (strict: ``"days": "7"`` is not a number; unknown fields are
refused by name); what needs the store or the embedder (the files are the caller's, the
chunking strategy fits the embedding model, attributes' limits, filters, ranking options) is
checked by the knowledge facade, each as a 400 naming its parameter.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.conversations import Metadata

MAX_CREATE_FILES = 500  # file_ids of one create (OpenAI's bound)
MAX_BATCH_FILES = 2000  # files of one batch (OpenAI's bound)
MAX_QUERIES = 10
MAX_QUERY_CHARS = 4096


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ExpiresAfter(_Body):
    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)


class CreateStoreBody(_Body):
    file_ids: list[str] | None = Field(default=None, max_length=MAX_CREATE_FILES)
    name: str | None = Field(default=None, max_length=256)
    description: str | None = Field(default=None, max_length=512)
    metadata: Metadata | None = None
    expires_after: ExpiresAfter | None = None
    chunking_strategy: dict[str, Any] | None = None


class UpdateStoreBody(_Body):
    """Only the fields sent change (``null`` clears ``metadata`` / ``expires_after``)."""

    name: str | None = Field(default=None, max_length=256)
    metadata: Metadata | None = None
    expires_after: ExpiresAfter | None = None


class CreateFileBody(_Body):
    file_id: str = Field(min_length=1, max_length=256)
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class UpdateFileBody(_Body):
    attributes: dict[str, Any] | None


class BatchFile(_Body):
    file_id: str = Field(min_length=1, max_length=256)
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class CreateBatchBody(_Body):
    file_ids: list[str] | None = Field(default=None, min_length=1, max_length=MAX_BATCH_FILES)
    files: list[BatchFile] | None = Field(default=None, min_length=1, max_length=MAX_BATCH_FILES)
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class SearchBody(_Body):
    query: str | list[str]
    filters: dict[str, Any] | None = None
    max_num_results: int = Field(default=10, ge=1, le=50)
    ranking_options: dict[str, Any] | None = None
    rewrite_query: bool = False  # accepted; there is no rewrite model: the query is searched as given

    def queries(self) -> list[str]:
        return [self.query] if isinstance(self.query, str) else list(self.query)
