"""Harmony message headers and token bytes, read the way openai-harmony reads them.

A Harmony message is ``<|start|>{header}<|message|>{body}`` ended by ``<|end|>``,
``<|return|>`` or ``<|call|>``.  The header names the author (omitted for the first message
of an answer: the prompt already opened ``<|start|>assistant``), the channel
(``<|channel|>analysis``), the recipient (``to=functions.NAME``) and the content type
(``<|constrain|>json``).  :func:`parse_header` follows openai-harmony 0.0.8's
``StreamableParser::parse_header_from_string`` rule for rule (Rust's whitespace classes
included), so the gateway's own parser (:mod:`app.formats.harmony.parse`) agrees with it on
every header; ``tests/unit/formats/harmony/test_parse_equivalence.py`` checks that.

:func:`token_bytes` is the raw bytes of one token id (memoized: a token's bytes never change),
the input of the body's incremental UTF-8 decoding.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from app.formats.harmony.vocab import harmony_encoding

ROLES = frozenset({"user", "assistant", "system", "developer", "tool"})
CHANNEL_MARKER = "<|channel|>"
CONSTRAIN_MARKER = "<|constrain|>"
# Rust's char::is_whitespace (Unicode White_Space), used by trim() and the channel's end
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_CHANNEL_END = re.compile("[<" + re.escape(_WHITE_SPACE) + "]")
_ASCII_WHITESPACE = re.compile("[ \t\n\x0c\r]+")  # Rust's split_ascii_whitespace
_MAX_MEMO = 1 << 16  # distinct token ids remembered (an answer uses a few thousand)
KNOWN_BYTES: dict[int, bytes] = {}  # token id -> its bytes, memoized by token_bytes


class HarmonyFormatError(ValueError):
    """The model's output breaks Harmony's message structure."""


class Header(NamedTuple):
    role: str
    channel: str | None
    recipient: str | None


def token_bytes(token: int) -> bytes:
    """The bytes token ``token`` stands for (special tokens: their text, e.g. ``<|end|>``).
    An id outside the vocabulary raises (openai-harmony's error)."""
    data = KNOWN_BYTES.get(token)
    if data is None:
        text = harmony_encoding().decode([token], errors="surrogateescape")
        data = text.encode("utf-8", "surrogateescape")
        if len(KNOWN_BYTES) < _MAX_MEMO:
            KNOWN_BYTES[token] = data
    return data


def decode_header(tokens: list[int], role: str | None, complete: bool = True) -> Header:
    """The header of a message from its token ids (``<|start|>`` and ``<|message|>``
    excluded); ``role``: the author when the prompt already named it. ``complete=False``: a
    header a stop token cut before its ``<|message|>`` (read for its channel only, as
    openai-harmony does; only a broken channel fails)."""
    try:
        text = b"".join(token_bytes(t) for t in tokens).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarmonyFormatError(f"could not decode header: {exc}") from None
    return parse_header(text, role, complete)


def parse_header(text: str, role: str | None, complete: bool = True) -> Header:
    """Author, channel and recipient of a header string (see the module docstring)."""
    channel: str | None = None
    idx = text.find(CHANNEL_MARKER)
    if idx >= 0:
        after = text[idx + len(CHANNEL_MARKER):]
        end = _CHANNEL_END.search(after)
        stop = end.start() if end else len(after)
        if stop == 0:
            raise HarmonyFormatError("channel marker present but no channel value found in header")
        channel = after[:stop]
        text = text[:idx] + after[stop:]
    text = text.strip(_WHITE_SPACE)
    if CONSTRAIN_MARKER in text:
        text = text.replace(CONSTRAIN_MARKER, " " + CONSTRAIN_MARKER).strip(_WHITE_SPACE)
    parts = [p for p in _ASCII_WHITESPACE.split(text) if p]
    if role is None:
        if not parts:
            raise HarmonyFormatError("message header did not contain a role")
        if parts[0] in ROLES:
            role = parts[0]
        elif len(parts) > 1 or parts[0].startswith("to="):
            parts.pop(0)  # an unknown author addressing someone: a tool's message
            role = "tool"
        else:
            raise HarmonyFormatError(f"Unknown role: {parts[0]}")
    if parts and parts[0] == role:
        parts.pop(0)
    recipient: str | None = None
    if parts and complete:
        count = len(parts)
        last = parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif count == 1:
            recipient = last
        elif parts:  # ``last`` is the content type; the one before it the recipient
            raw = parts.pop()
            recipient = raw[3:] if raw.startswith("to=") else raw
        if parts:
            raise HarmonyFormatError(f"unexpected tokens remaining in message header: "
                                     f"{' '.join(parts)!r}")
    return Header(role, channel, recipient)
