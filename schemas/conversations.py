"""Wire models of OpenAI's Conversations API request bodies (``/v1/conversations``).

Items are the Responses API's input items (:data:`schemas.responses.InputItem`), at most 20
per request as OpenAI has it. Metadata follows OpenAI's limits: at most 16 pairs, keys up to
64 characters, values up to 512. Unknown fields are refused by name (``unknown_parameter``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field

from schemas.responses import InputItem, _Wire

MAX_ITEMS = 20  # per create / add request (OpenAI: "up to 20 items at a time")
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


def _check_metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_METADATA_PAIRS:
        raise ValueError(f"metadata may hold at most {MAX_METADATA_PAIRS} key-value pairs, "
                         f"not {len(value)}")
    for key, text in value.items():
        if len(key) > MAX_METADATA_KEY:
            raise ValueError(f"metadata keys may be at most {MAX_METADATA_KEY} characters "
                             f"(a key has {len(key)})")
        if len(text) > MAX_METADATA_VALUE:
            raise ValueError(f"metadata values may be at most {MAX_METADATA_VALUE} characters "
                             f"(the value of {key[:64]!r} has {len(text)})")
    return value


Metadata = Annotated[dict[str, str], AfterValidator(_check_metadata)]


class CreateConversationBody(_Wire):
    """``POST /v1/conversations``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[InputItem] | None = Field(default=None, max_length=MAX_ITEMS)
    metadata: Metadata | None = None


class UpdateConversationBody(_Wire):
    """``POST /v1/conversations/{id}``: the new metadata (null clears it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    metadata: Metadata | None


class AddItemsBody(_Wire):
    """``POST /v1/conversations/{id}/items``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS)

