"""The vocabulary of a GGUF model file: which token ids are not ordinary text.

llama.cpp matches a model's USER_DEFINED added tokens in plain text even when it is told
not to parse special tokens (tests/fixtures/wire/README.md, 06f), so client text could reach
the model as one of them.  The token types live only in the GGUF file
(``tokenizer.ggml.token_type``), not in any llama-server endpoint, so the gateway reads them
from the file: the one ``--embedded`` serves, the one llama-server reports in ``/props``
(``model_path``) when the gateway can read it, or one the operator names in the config.

This is a small reader of the GGUF metadata section only (no tensors, no numpy): header,
key/value pairs, arrays.  The file is untrusted input to it: every length is checked
against the bytes that are there, and anything malformed is a :class:`GGUFError`.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_NOT_TEXT = frozenset({UNKNOWN, CONTROL, USER_DEFINED, UNUSED})

# value type → struct format of one scalar (8: string, 9: array are handled apart)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_DEPTH = 4


class GGUFError(ValueError):
    """Not a GGUF file this reader understands (truncated, malformed, or no vocabulary)."""


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """A model's token table, reduced to what the gateway needs."""

    size: int
    # id → text of every token that is not ordinary text: control, user-defined (added),
    # unknown and unused tokens.  Added tokens that are only whitespace (Gemma's runs of
    # newlines, spaces and tabs) are text and left out: they cannot be a marker.
    markers: dict[int, str]


class _Reader:
    def __init__(self, buf: bytes | mmap.mmap) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GGUFError("the file ends inside its metadata")
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def raw_string(self) -> tuple[int, int]:
        """(start, end) of the next string's bytes."""
        n = self.take("Q")
        start = self.pos
        if n > len(self.buf) - start:
            raise GGUFError("a string is longer than the rest of the file")
        self.pos = start + n
        return start, self.pos

    def string(self) -> str:
        start, end = self.raw_string()
        return bytes(self.buf[start:end]).decode("utf-8", "replace")

    def count(self, min_item: int) -> int:
        n = self.take("Q")
        if n * max(min_item, 1) > len(self.buf) - self.pos:
            raise GGUFError("an array is longer than the rest of the file")
        return int(n)

    def value(self, vtype: int, depth: int = 0) -> Any:
        """A scalar, a string, or a list; arrays of strings are (start, end) spans."""
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            if depth >= _MAX_DEPTH:
                raise GGUFError("arrays nested too deep")
            etype = self.take("I")
            if etype == _STRING:
                return [self.raw_string() for _ in range(self.count(8))]
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                n = self.count(struct.calcsize(fmt))
                values = struct.unpack_from(f"<{n}{fmt}", self.buf, self.pos)
                self.pos += n * struct.calcsize(fmt)
                return list(values)
            if etype == _ARRAY:
                return [self.value(_ARRAY, depth + 1) for _ in range(self.count(12))]
            raise GGUFError(f"unknown array element type {etype}")
        raise GGUFError(f"unknown value type {vtype}")


def parse_vocabulary(buf: bytes | mmap.mmap) -> Vocabulary:
    """The vocabulary in a GGUF file's bytes (only its metadata section is read)."""
    r = _Reader(buf)
    if bytes(buf[:4]) != MAGIC:
        raise GGUFError("not a GGUF file (no GGUF magic)")
    r.pos = 4
    version = r.take("I")
    if version not in (2, 3):
        raise GGUFError(f"GGUF version {version} is not supported (2 and 3 are)")
    r.take("Q")  # tensor count
    n_kv = r.count(12)
    tokens: list[tuple[int, int]] | None = None
    types: list[int] | None = None
    for _ in range(n_kv):
        key = r.string()
        value = r.value(r.take("I"))
        if key == "tokenizer.ggml.tokens":
            tokens = value if isinstance(value, list) else None
        elif key == "tokenizer.ggml.token_type":
            types = value if isinstance(value, list) else None
        if tokens is not None and types is not None:
            break
    if not tokens or types is None or len(types) != len(tokens) or not all(
            isinstance(t, tuple) for t in tokens[:1]):
        raise GGUFError("the file has no token list with token types")
    markers: dict[int, str] = {}
    for i, kind in enumerate(types):
        if kind in _NOT_TEXT:
            start, end = tokens[i]
            text = bytes(buf[start:end]).decode("utf-8", "replace")
            if text.strip():
                markers[i] = text
    return Vocabulary(len(tokens), markers)


def read_vocabulary(path: str | Path) -> Vocabulary:
    """The vocabulary of the GGUF file at ``path`` (memory-mapped; blocking: call it in a
    worker thread from async code)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return parse_vocabulary(mm)
    except (OSError, ValueError) as exc:
        if isinstance(exc, GGUFError):
            raise
        raise GGUFError(f"cannot read {path}: {exc}") from None
