"""The Batch API's request body (``POST /v1/batches``), as OpenAI defines it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.base import NullMeansDefault


class OutputExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=2592000)


class CreateBatchBody(NullMeansDefault):
    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(min_length=1, max_length=256)
    endpoint: Literal["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions",
                      "/v1/messages"]
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    output_expires_after: OutputExpiresAfter | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, item in (value or {}).items():
            if len(key) > 64 or len(item) > 512:
                raise ValueError("metadata keys are at most 64 characters, values at most 512")
        return value
