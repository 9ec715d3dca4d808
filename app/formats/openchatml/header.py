"""OpenChatML 2.2 building blocks shared by the stream decoder and the transcript tools.

* :class:`Lexer` — an incremental scanner that turns arbitrary slices of text into
  text pieces and control tokens (spec §3).  Control tokens are the nine literal ASCII
  sequences, recognized across any slice boundary; ``<<|x|>`` (a doubled leading
  ``<``) is the escape for the literal text ``<|x|>``; after ``<|literal|>`` nothing
  but ``<|endliteral|>`` is recognized.  Only a suffix that could still become a token
  (or an escape) is held back.
* :func:`parse_header` — the header grammar of §6 / §15 plus the HIP-1 forms (``to=``
  after the channel tag, a bare Harmony content type such as ``commentary json``).
  Malformed headers raise :class:`SpecError` with code ``E-PARSE-HEADER``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

START, CHANNEL, MESSAGE, CALL, CONSTRAIN = "start", "channel", "message", "call", "constrain"
RETURN, END, LITERAL, ENDLITERAL = "return", "end", "literal", "endliteral"
TOKENS: tuple[str, ...] = (START, CHANNEL, MESSAGE, CALL, CONSTRAIN, RETURN, END, LITERAL,
                           ENDLITERAL)
TOKEN_TEXT: dict[str, str] = {name: f"<|{name}|>" for name in TOKENS}
_BY_TEXT = {text: name for name, text in TOKEN_TEXT.items()}
_ENDLITERAL_TEXT = TOKEN_TEXT[ENDLITERAL]
_LONGEST = 1 + max(map(len, _BY_TEXT))  # an escaped token: only a shorter rest may be partial

CHANNELS = ("analysis", "commentary", "final")
ROLE_RE = re.compile(r"^(system|developer|user|assistant|tool|functions\.[A-Za-z0-9_-]+)$")
RECIPIENT_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_VALUE_RE = re.compile(r"^[\x21-\x7e]+$")  # 1*VCHAR
_WSP = re.compile(r"[ \t]+")
MAX_HEADER_CHARS = 512


class SpecError(Exception):
    """A violation of the spec, with its §14 error code and the offset where it was found."""

    def __init__(self, code: str, message: str, pos: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.pos = pos


@dataclass(frozen=True, slots=True)
class Piece:
    """Lexer output: ``kind`` is ``"text"`` or a token name; ``pos`` is its offset."""

    kind: str
    text: str
    pos: int


def _is_partial(rest: str) -> bool:
    """Could ``rest`` (starting with '<') still grow into a token or an escaped token?"""
    return any(t.startswith(rest) or ("<" + t).startswith(rest) for t in _BY_TEXT)


class Lexer:
    def __init__(self) -> None:
        self._buf = ""
        self._pos = 0  # stream offset of _buf[0]
        self.in_literal = False

    def feed(self, text: str) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        buf, i, text_start = self._buf, 0, 0

        def emit_text(end: int) -> None:
            if end > text_start:
                out.append(Piece("text", buf[text_start:end], self._pos + text_start))

        while True:
            if self.in_literal:
                j = buf.find(_ENDLITERAL_TEXT, i)
                if j < 0:
                    keep = _partial_suffix(buf, i, _ENDLITERAL_TEXT)
                    emit_text(keep)
                    self._consume(keep)
                    return out
                emit_text(j)
                out.append(Piece(ENDLITERAL, _ENDLITERAL_TEXT, self._pos + j))
                self.in_literal = False
                i = text_start = j + len(_ENDLITERAL_TEXT)
                continue
            j = buf.find("<", i)
            if j < 0:
                emit_text(len(buf))
                self._consume(len(buf))
                return out
            # (one lookup per '<', no copy of the rest: a run of 500 KB of '<' took 6 s)
            if buf.startswith("<|", j):
                end = buf.find("|>", j + 2, j + _LONGEST + 2)
                token = buf[j:end + 2] if end >= 0 else ""
                if token in _BY_TEXT:
                    emit_text(j)
                    out.append(Piece(_BY_TEXT[token], token, self._pos + j))
                    i = text_start = j + len(token)
                    if _BY_TEXT[token] == LITERAL:
                        self.in_literal = True
                    continue
            elif buf.startswith("<<|", j):
                end = buf.find("|>", j + 3, j + _LONGEST + 2)
                escaped = buf[j + 1:end + 2] if end >= 0 else ""
                if escaped in _BY_TEXT:  # '<<|x|>' is the text '<|x|>'
                    emit_text(j)
                    out.append(Piece("text", escaped, self._pos + j))
                    i = text_start = j + 1 + len(escaped)
                    continue
            if len(buf) - j < _LONGEST and _is_partial(buf[j:]):  # only a short rest can be
                emit_text(j)
                self._consume(j)
                return out
            i = j + 1

    def flush(self) -> list[Piece]:
        """Input ended: whatever is held back is plain text."""
        if not self._buf:
            return []
        piece = Piece("text", self._buf, self._pos)
        self._consume(len(self._buf))
        return [piece]

    @property
    def offset(self) -> int:
        return self._pos + len(self._buf)

    def _consume(self, n: int) -> None:
        self._buf = self._buf[n:]
        self._pos += n


def _partial_suffix(buf: str, start: int, token: str) -> int:
    """Index from which ``buf`` ends with a proper prefix of ``token`` (or len(buf))."""
    for k in range(min(len(token) - 1, len(buf) - start), 0, -1):
        if token.startswith(buf[len(buf) - k:]):
            return len(buf) - k
    return len(buf)


@dataclass(frozen=True, slots=True)
class Header:
    role: str
    recipient: str | None = None
    call_id: str | None = None
    name: str | None = None
    intent: str | None = None
    content_type: str | None = None
    channel: str | None = None
    constrain: str | None = None


_START_KEYS = ("to", "call_id", "name", "intent", "content_type")
_CHANNEL_KEYS = ("to", "intent", "content_type")


def _attributes(words: list[str], allowed: tuple[str, ...], where: str, pos: int,
                into: dict[str, str], bare: list[str] | None = None) -> None:
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            if bare is not None and not bare and _VALUE_RE.match(word):
                bare.append(word)  # Harmony's plain content type: '<|channel|>commentary json'
                continue
            raise SpecError("E-PARSE-HEADER", f"unexpected {word!r} in the {where}", pos)
        if key not in allowed:
            raise SpecError("E-PARSE-HEADER", f"attribute {key!r} is not allowed in the {where}",
                            pos)
        if not value or not _VALUE_RE.match(value) or "<|" in value or "|>" in value:
            raise SpecError("E-PARSE-HEADER", f"attribute {key}= has an invalid value", pos)
        if key in into:
            raise SpecError("E-PARSE-HEADER", f"attribute {key}= is given twice", pos)
        into[key] = value


def parse_header(start: str, channel: str | None, constrain: str | None, *, pos: int = 0,
                 implicit_role: str | None = None) -> Header:
    """A header from its three parts: the text after ``<|start|>`` (with the role unless
    ``implicit_role`` is given, as for a completion after ``<|start|>assistant``), the
    text after ``<|channel|>`` and the text after ``<|constrain|>`` (``None`` if absent)."""
    words = _WSP.split(start.strip(" \t"))
    words = [w for w in words if w]
    if implicit_role is not None:
        if start and start[0] not in " \t":
            raise SpecError("E-PARSE-HEADER", "attributes must be separated from the role "
                            "by whitespace", pos)
        role = implicit_role
    else:
        if not words or not ROLE_RE.match(words[0]):
            found = words[0] if words else ""
            raise SpecError("E-PARSE-HEADER", f"unknown or missing role {found!r}", pos)
        role, words = words[0], words[1:]
    attrs: dict[str, str] = {}
    _attributes(words, _START_KEYS, "start header", pos, attrs)
    chan: str | None = None
    bare: list[str] = []
    if channel is not None:
        cwords = [w for w in _WSP.split(channel.strip(" \t")) if w]
        if not cwords or cwords[0] not in CHANNELS:
            found = cwords[0] if cwords else ""
            raise SpecError("E-PARSE-HEADER", f"unknown or missing channel {found!r}", pos)
        chan = cwords[0]
        _attributes(cwords[1:], _CHANNEL_KEYS, "channel tag", pos, attrs, bare)
    ctype = None
    if constrain is not None:
        ctype = constrain.strip(" \t")
        if not _VALUE_RE.match(ctype):
            raise SpecError("E-PARSE-HEADER", "<|constrain|> needs one content type", pos)
    recipient = attrs.get("to")
    if recipient is not None and not RECIPIENT_RE.match(recipient):
        raise SpecError("E-PARSE-HEADER", f"invalid recipient {recipient!r}", pos)
    if bare and "content_type" in attrs:
        raise SpecError("E-PARSE-HEADER", "content type is given twice", pos)
    return Header(role=role, recipient=recipient, call_id=attrs.get("call_id"),
                  name=attrs.get("name"), intent=attrs.get("intent"),
                  content_type=attrs.get("content_type") or (bare[0] if bare else None),
                  channel=chan, constrain=ctype)


PartKind = Literal["reasoning", "preamble", "text"]


def classify(header: Header) -> PartKind:
    """Where a non-call assistant message goes (§4, §5, §11): analysis is hidden; commentary
    is a user-visible preamble unless its intent is non-display (``status`` / ``debug``);
    final, or no channel at all (1.x back-compat, §13), is the answer."""
    if header.channel == "analysis":
        return "reasoning"
    if header.channel == "commentary":
        return "reasoning" if header.intent in ("status", "debug") else "preamble"
    return "text"


def is_call(header: Header) -> bool:
    return header.recipient is not None and header.recipient != "assistant"
