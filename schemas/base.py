"""What every request body schema shares."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator


class NullMeansDefault(BaseModel):
    """``"field": null`` is the field left out: OpenAI's API accepts explicit nulls for every
    optional field, and SDKs, Codex and agent frameworks send them."""

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            return {k: v for k, v in data.items() if v is not None}
        return data
