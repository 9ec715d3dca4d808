"""Chunking as OpenAI does it: windows of o200k tokens with an overlap.

* :func:`strategy` turns a request's ``chunking_strategy`` into a :class:`Chunking`:
  ``auto`` (or none given) is OpenAI's 800 tokens with 400 of overlap, capped to the embedding
  model's ``max_input_tokens`` (the overlap then half the window); ``static`` is validated as
  OpenAI validates it (``max_chunk_size_tokens`` 100..4096, ``chunk_overlap_tokens`` 0..half of
  it) and must fit the embedding model's input (else a 400 naming the parameter: a chunk the
  model cannot embed whole would be cut silently).
* :func:`chunk` cuts a text into chunk texts: token windows of ``max_chunk_size_tokens`` starting
  every ``max - overlap`` tokens; the last window ends at the text's end.  Tokens are the o200k
  encoding's (the repo's :func:`~app.formats.harmony.vocab.harmony_encoding`), encoded in
  bounded calls (:func:`~app.formats.harmony.text.encode_text`: special-token text stays text),
  and a window's text is cut from the UTF-8 bytes at its tokens' byte offsets, moved back to a
  character boundary, so no character is ever split or replaced.  CPU work: call it in a thread.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from app.core.errors import InvalidRequest
from app.formats.harmony.text import encode_text
from app.formats.harmony.vocab import harmony_encoding
from app.knowledge.vectors import Chunking

AUTO_MAX, AUTO_OVERLAP = 800, 400
STATIC_MIN, STATIC_MAX = 100, 4096


def auto(max_input_tokens: int | None = None) -> Chunking:
    size = AUTO_MAX if not max_input_tokens else max(1, min(AUTO_MAX, max_input_tokens))
    return Chunking(size, min(AUTO_OVERLAP, size // 2), "auto")


def _int(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"Invalid type for '{param}': expected an integer.", param=param,
                             code="invalid_type")
    return value


def strategy(given: Mapping[str, Any] | None, max_input_tokens: int | None = None, *,
             param: str = "chunking_strategy") -> Chunking:
    """A request's ``chunking_strategy`` (``None``: ``auto``), or a 400 naming the parameter."""
    if given is None:
        return auto(max_input_tokens)
    if not isinstance(given, Mapping):
        raise InvalidRequest(f"Invalid type for '{param}': expected an object.", param=param,
                             code="invalid_type")
    kind = given.get("type")
    if kind == "auto":
        extra = set(given) - {"type"}
        if extra:
            raise InvalidRequest(f"Unknown parameter: '{param}.{sorted(extra)[0]}'.",
                                 param=f"{param}.{sorted(extra)[0]}", code="unknown_parameter")
        return auto(max_input_tokens)
    if kind != "static":
        raise InvalidRequest(f"Invalid value for '{param}.type': expected 'auto' or 'static'.",
                             param=f"{param}.type", code="invalid_value")
    static = given.get("static")
    if not isinstance(static, Mapping):
        raise InvalidRequest(f"Missing required parameter: '{param}.static'.", param=f"{param}.static",
                             code="missing_required_parameter")
    where = f"{param}.static"
    for name in ("max_chunk_size_tokens", "chunk_overlap_tokens"):
        if name not in static:
            raise InvalidRequest(f"Missing required parameter: '{where}.{name}'.", param=f"{where}.{name}",
                                 code="missing_required_parameter")
    size = _int(static["max_chunk_size_tokens"], f"{where}.max_chunk_size_tokens")
    overlap = _int(static["chunk_overlap_tokens"], f"{where}.chunk_overlap_tokens")
    if not STATIC_MIN <= size <= STATIC_MAX:
        raise InvalidRequest(f"Invalid '{where}.max_chunk_size_tokens': {size}; it must be from "
                             f"{STATIC_MIN} to {STATIC_MAX}.", param=f"{where}.max_chunk_size_tokens",
                             code="invalid_value")
    if overlap < 0 or overlap > size // 2:
        raise InvalidRequest(f"Invalid '{where}.chunk_overlap_tokens': {overlap}; it must be from 0 to "
                             f"half of max_chunk_size_tokens ({size // 2}).",
                             param=f"{where}.chunk_overlap_tokens", code="invalid_value")
    if max_input_tokens and size > max_input_tokens:
        raise InvalidRequest(f"Invalid '{where}.max_chunk_size_tokens': {size}; the embedding model of "
                             f"this gateway reads at most {max_input_tokens} tokens at a time.",
                             param=f"{where}.max_chunk_size_tokens", code="invalid_value")
    return Chunking(size, overlap, "static")


@functools.lru_cache(maxsize=262144)
def _token_bytes(token: int) -> int:
    return len(harmony_encoding()._inner.decode_bytes([token]))


def _boundary(data: bytes, pos: int) -> int:
    """``pos`` moved back to the start of the UTF-8 character it falls in."""
    while 0 < pos < len(data) and data[pos] & 0xC0 == 0x80:
        pos -= 1
    return pos


def chunk(text: str, chunking: Chunking) -> list[str]:
    """The chunk texts of ``text`` (none for a text without tokens)."""
    tokens = encode_text(harmony_encoding(), text)
    if not tokens:
        return []
    data = text.encode("utf-8")
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + _token_bytes(token))
    size = chunking.max_chunk_size_tokens
    step = max(1, size - chunking.chunk_overlap_tokens)
    out: list[str] = []
    start = 0
    while True:
        end = min(start + size, len(tokens))
        a, b = _boundary(data, offsets[start]), _boundary(data, offsets[end])
        piece = data[a:b].decode("utf-8", errors="replace").strip()
        if piece:
            out.append(piece)
        if end >= len(tokens):
            return out
        start += step
