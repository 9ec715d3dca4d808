"""Incremental OpenChatML 2.2 output parser on text (a :class:`app.formats.parsing.base.TextDecoder`).

The prompt ends with ``<|start|>assistant`` (like Harmony's generation prompt), so the
model's output starts inside an assistant header: ``<|channel|>final<|message|>…`` or
`` to=functions.f<|channel|>commentary<|constrain|>json<|message|>…``.  Control tokens
are literal ASCII sequences split across arbitrary chunks (:class:`Lexer`).

Mapping (spec §4, §5, §11; same events as :mod:`app.formats.harmony.parse`):

* ``analysis`` → :class:`ReasoningDelta` (never answer text);
* ``commentary`` without a recipient (``intent=preamble`` or none) → :class:`PreambleDelta`;
  ``intent=status`` / ``debug`` are non-display and become reasoning;
* ``to=functions.X`` / ``to=X`` (start header, canonical, or after the channel tag,
  HIP-1) → tool call; the id is the header's ``call_id=`` or a fresh one;
* ``final`` → :class:`TextDelta`; no channel means final (1.x back-compat, §13) unless
  ``require_channels`` (``E-PARSE-CHANNEL-MISSING``).

``<|return|>`` stops with ``stop``; ``<|call|>`` with ``tool_calls`` when a call was made.
A header from another role (the model starting the next user / tool turn) also ends the
assistant's turn.  Spec errors (§14) end the stream with an :class:`app.core.events.Error`
whose code is the spec's (``E-PARSE-HEADER``, ``E-BODY-CONSTRAINT-VIOLATION``,
``E-STREAM-TRUNCATED``, ...).
"""

from __future__ import annotations

import json
from typing import Literal

from app.core import events as ev
from app.formats.openchatml.header import (
    CALL,
    CHANNEL,
    CONSTRAIN,
    END,
    ENDLITERAL,
    LITERAL,
    MAX_HEADER_CHARS,
    MESSAGE,
    RETURN,
    START,
    TOKEN_TEXT,
    Header,
    Lexer,
    Piece,
    SpecError,
    classify,
    is_call,
    parse_header,
)
from app.formats.parsing.base import EndKind
from app.formats.parsing.parts import Parts

Recipients = Literal["any", "functions"]
_State = Literal["header", "body", "between"]


class OpenChatMLDecoder:
    """``recipients="functions"`` makes any recipient other than ``functions.*`` an
    ``unsupported_recipient`` error, exactly like the Harmony token parser (for gateways
    that provide no built-in tools); ``"any"`` turns ``to=X`` into a call of tool ``X``."""

    def __init__(self, *, prefill: str = "", require_channels: bool = False,
                 recipients: Recipients = "any") -> None:
        self.stopped: ev.FinishReason | None = None
        self._lexer = Lexer()
        self._require_channels = require_channels
        self._recipients = recipients
        self._state: _State = "header"
        self._implicit_role: str | None = "assistant"
        self._start: list[str] = []  # header text after <|start|> / <|channel|> / <|constrain|>
        self._channel: list[str] | None = None
        self._constrain: list[str] | None = None
        self._header_pos = 0
        self._header: Header | None = None
        self._kind: ev.PartKind | Literal["tool"] | None = None
        self._body: list[str] = []
        self._parts = Parts()
        self._messages = 0
        self._failed = False
        self._pending: list[ev.Event] = []
        self._pending = self.decode(prefill) if prefill else []

    # -- TextDecoder --------------------------------------------------------------
    def decode(self, text: str) -> list[ev.Event]:
        out, self._pending = self._pending, []
        if self._failed or self.stopped is not None:
            return out
        try:
            for piece in self._lexer.feed(text):
                self._piece(piece, out)
                if self.stopped is not None or self._failed:
                    break
        except SpecError as exc:
            out.append(self._fail(exc))
        return out

    def flush(self, end: EndKind) -> tuple[list[ev.Event], ev.FinishReason | None]:
        out, self._pending = self._pending, []
        if self._failed:
            return out, None
        if self.stopped is not None:
            return out, self.stopped
        try:
            for piece in self._lexer.flush():
                self._piece(piece, out)
            if self._failed:
                return out, None
            if self.stopped is not None:
                return out, self.stopped
            if end == "length":
                self._parts.close(out)  # an unfinished call stays open: the budget cut it
                return out, "length"
            if end == "closed" or self._lexer.in_literal:
                raise SpecError("E-STREAM-TRUNCATED", "the stream ended without a stop token",
                                self._lexer.offset)
            # "eos" / "stop_string": the backend stopped on a token not in the text, which
            # closes the open message like <|end|> / <|return|> / <|call|> would.
            if self._state == "body":
                call = self._kind == "tool"
                self._close(out, self._lexer.offset)
                return out, "tool_calls" if call else "stop"
            if self._state == "header" and (self._messages or not self._header_empty()):
                raise SpecError("E-STREAM-TRUNCATED", "the stream ended inside a message "
                                "header", self._lexer.offset)
            return out, "tool_calls" if self._parts.calls else "stop"
        except SpecError as exc:
            out.append(self._fail(exc))
            return out, None

    # -- internals ----------------------------------------------------------------
    def _fail(self, exc: SpecError) -> ev.Error:
        self._failed = True
        return ev.Error(f"{exc.message} (at offset {exc.pos})", code=exc.code)

    def _piece(self, piece: Piece, out: list[ev.Event]) -> None:
        if self._state == "header":
            self._header_piece(piece, out)
        elif self._state == "body":
            self._body_piece(piece, out)
        elif piece.kind == START:
            self._open_header(None, piece.pos + len(piece.text))
        elif piece.kind != "text" or piece.text.strip():
            raise SpecError("E-PARSE-HEADER", f"expected <|start|>, found {piece.text[:20]!r}",
                            piece.pos)

    def _open_header(self, implicit_role: str | None, pos: int) -> None:
        self._state = "header"
        self._implicit_role = implicit_role
        self._start, self._channel, self._constrain = [], None, None
        self._header_pos = pos

    def _header_empty(self) -> bool:
        return not any(self._start) and self._channel is None and self._constrain is None

    def _header_piece(self, piece: Piece, out: list[ev.Event]) -> None:
        kind = piece.kind
        if kind == "text":
            current = self._constrain if self._constrain is not None else (
                self._channel if self._channel is not None else self._start)
            current.append(piece.text)
            if piece.pos + len(piece.text) - self._header_pos > MAX_HEADER_CHARS:
                raise SpecError("E-PARSE-HEADER", "message header is too long", self._header_pos)
        elif kind == CHANNEL and self._channel is None and self._constrain is None:
            self._channel = []
        elif kind == CONSTRAIN and self._constrain is None:
            self._constrain = []
        elif kind == START and not self._messages and self._header_empty() \
                and self._implicit_role is not None:
            self._implicit_role = None  # the model repeated '<|start|>' of the prompt
        elif kind == MESSAGE:
            self._open_body(out)
        else:
            raise SpecError("E-PARSE-HEADER", f"unexpected {piece.text} in a message header",
                            piece.pos)

    def _open_body(self, out: list[ev.Event]) -> None:
        header = parse_header("".join(self._start),
                              None if self._channel is None else "".join(self._channel),
                              None if self._constrain is None else "".join(self._constrain),
                              pos=self._header_pos, implicit_role=self._implicit_role)
        if header.role != "assistant":  # the model began another role's turn: ours is over
            self.stopped = "tool_calls" if self._parts.calls else "stop"
            return
        if header.channel is None and self._require_channels:
            raise SpecError("E-PARSE-CHANNEL-MISSING", "the active profile requires a channel "
                            "on every message", self._header_pos)
        self._header, self._body, self._state = header, [], "body"
        if is_call(header):
            recipient = header.recipient or ""
            if self._recipients == "functions" and not recipient.startswith("functions."):
                self._failed = True
                out.append(ev.Error(f"The model addressed {recipient!r}, a built-in tool this "
                                    "gateway does not provide.", code="unsupported_recipient"))
                return
            self._kind = "tool"
            self._parts.start_call(recipient.removeprefix("functions."), out, header.call_id)
        else:
            self._kind = classify(header)

    def _body_piece(self, piece: Piece, out: list[ev.Event]) -> None:
        kind = piece.kind
        if kind in (LITERAL, ENDLITERAL):
            return  # literal markers delimit opaque text; they are not content
        if kind in (END, RETURN, CALL):
            self._close(out, piece.pos)
            if kind == RETURN:
                self.stopped = "stop"
            elif kind == CALL:
                self.stopped = "tool_calls" if self._parts.calls else "stop"
            return
        text = piece.text if kind == "text" else TOKEN_TEXT[kind]
        if not text:
            return
        self._body.append(text)
        part = self._kind
        if part == "tool":
            self._parts.arguments(text, out)
        elif part is not None:
            self._parts.delta(part, text, out)

    def _close(self, out: list[ev.Event], pos: int) -> None:
        header = self._header
        assert header is not None
        body = "".join(self._body)
        if header.constrain is not None and header.constrain.lower() == "json":
            try:
                json.loads(body)
            except ValueError:
                raise SpecError("E-BODY-CONSTRAINT-VIOLATION", "the message body is not the "
                                "JSON its <|constrain|>json header declares", pos) from None
        self._messages += 1
        if self._kind == "tool":
            self._parts.end_call(out)
        else:
            self._parts.close(out)
        self._kind = None
        self._state = "between"
