"""Wire models of the passthrough request bodies: OpenAI's legacy Completions and
Embeddings, and vLLM's ``/tokenize`` / ``/detokenize``.

As in :mod:`schemas.chat`, unknown fields are ignored and known fields are validated
strictly (``"stream": "yes"`` is not a bool); responses are plain dicts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.chat import StreamOptions

TokenId = Annotated[int, Field(ge=0, lt=2**31)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class CompletionRequest(_Wire):
    model: str
    # a string, a list of strings, a list of token ids, or a list of token-id lists
    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=128)
    best_of: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    stop: str | list[str] | None = None
    seed: int | None = None
    suffix: str | None = None
    ignore_eos: bool = False  # vLLM / llama.cpp extension
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class EmbeddingRequest(_Wire):
    model: str
    input: str | list[str] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class TokenizeRequest(_Wire):
    model: str
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(_Wire):
    model: str
    tokens: list[TokenId]
