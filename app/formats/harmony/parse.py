"""Incremental Harmony parser on token ids.

Push tokens with :meth:`HarmonyEventParser.feed` (one backend chunk at a time; a huge one with
:meth:`HarmonyEventParser.feed_slices`, :data:`SLICE_TOKENS` ids at a time) and call
:meth:`HarmonyEventParser.close` when the backend stream ends; both return the events the new
input produced.  :meth:`HarmonyEventParser.feed_joined` feeds the chunks of one upstream read of an
answer that is only folded (a non-streamed one): the same events with the adjacent deltas of one
part joined, decoded together instead of one delta a token.  Channel mapping:

* ``final`` (a content type such as ``<|constrain|>json`` allowed) → :class:`TextDelta`,
  the only text that is ever the answer;
* ``commentary`` without recipient → :class:`PreambleDelta` (meant for the user: the
  gateway shows it as a preamble);
* ``to=functions.NAME`` on any channel → tool call (started / argument deltas / done);
  ``to=NS.NAME`` for a tool namespace of the request → the call of tool ``NS__NAME``;
* everything else an assistant message can be → :class:`ReasoningDelta`, never text:
  ``analysis``; a message with no channel (the spec's system message says "Channel must be
  included for every message", and gpt-oss always writes one: a channel-less header,
  first in the answer or after another message, a role alone, or only a content type, is
  not ``final``); a channel Harmony does not define; and ``to=assistant`` on any channel
  (the model addressing itself, as a tool result addresses the assistant: not the user).

Another recipient is a built-in tool the gateway does not run: an ``unsupported_recipient``
error; a header with ``<|channel|>`` but no channel name is malformed: an error, as in
openai-harmony.

``<|return|>`` finishes with ``stop``, ``<|call|>`` with ``tool_calls``, a token
budget with ``length``.  A stream that ends without a stop token is an error.  A message
header with a role other than assistant (a fabricated user or system turn) ends the answer
with ``stop`` before any of that message is read.

The message structure is tracked by token id here (three states: expecting ``<|start|>``,
reading a header, reading a body), headers are read by :mod:`app.formats.harmony.header`,
and bodies are decoded by an incremental UTF-8 decoder over each token's bytes.  This is
openai-harmony's ``StreamableParser`` (``strict=False``) without its per-token cost (~12 µs a
token through it, ~1 µs here); the differential tests against the previous implementation on
it are in ``tests/unit/formats/harmony/test_parse_equivalence.py``.  Two deliberate
differences, both where openai-harmony loses text: an invalid UTF-8 sequence in a body becomes
U+FFFD at once (openai-harmony held the bytes after it until the next token, and dropped them
at the end of the message), and a body that ends inside a multi-byte character ends with
U+FFFD instead of silently losing it; a token id outside the vocabulary is an error instead
of making the rest of the body silently disappear.
"""

from __future__ import annotations

import codecs
import enum
from collections.abc import Iterator, Sequence

from app.core import events as ev
from app.core.output import Chunk, Finish, TokenLogprob, Usage
from app.formats.harmony.header import (
    CONSTRAIN_MARKER,
    KNOWN_BYTES,
    HarmonyFormatError,
    decode_header,
    token_bytes,
)
from app.formats.harmony.vocab import CALL, END, MESSAGE, RETURN, START
from app.formats.parsing.accounting import Accounting
from app.formats.parsing.parts import Parts

_TERMINATORS = frozenset({END, RETURN, CALL})
SLICE_TOKENS = 1024  # token ids read between two chances to give the event loop back
_Kind = str  # "reasoning" | "preamble" | "text" | "tool" | "unsupported"
_utf8 = codecs.getincrementaldecoder("utf-8")


class _State(enum.Enum):
    EXPECT_START = 1  # between messages: only ``<|start|>`` may come
    HEADER = 2  # after ``<|start|>`` (or at the start of the answer) until ``<|message|>``
    BODY = 3  # the message's content until its terminator


class HarmonyEventParser:
    def __init__(self, prompt_tokens: int, prefill: tuple[int, ...] = (),
                 namespaces: frozenset[str] = frozenset(), builtins: frozenset[str] = frozenset()) -> None:
        """``namespaces``: the tool namespaces of the request besides ``functions``; a call
        ``to=NS.NAME`` of one of them is the tool named ``NS__NAME``."""
        self._namespaces = namespaces
        self._builtins = builtins  # gpt-oss built-in tools the request has the gateway run
        self._state = _State.HEADER  # the prompt ends with ``<|start|>assistant``
        self._role: str | None = "assistant"  # the author the header may omit
        self._header: list[int] = []
        self._body = _utf8(errors="replace")
        self._acct = Accounting(prompt_tokens)
        self._parts = Parts()
        self._kind: _Kind | None = None
        self._stop_token: int | None = None
        self._done = False
        self._pending_logprobs: list[TokenLogprob] = []
        self._out: list[ev.Event] = []
        self._joined: list[bytes] = []  # body bytes not yet decoded (feed_joined)
        for tok in prefill:  # a forced header: may open a tool call, emitted on first feed
            self._step(tok, None)

    # -- public API ---------------------------------------------------------------
    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)  # vLLM sends usage in a chunk after the finish
        self._read(chunk, 0, len(chunk.token_ids))
        return self._end_chunk(chunk)

    def feed_slices(self, chunk: Chunk, size: int = SLICE_TOKENS) -> Iterator[list[ev.Event]]:
        """:meth:`feed`, ``size`` token ids at a time: the events of each slice as soon as it
        is read, so the caller can give the event loop back between slices (one upstream
        chunk of 100,000 ids is ~150 ms of parsing).  The events are those of :meth:`feed`."""
        n = len(chunk.token_ids)
        if self._done or n <= size:
            yield self.feed(chunk)
            return
        starts = range(0, n, size)
        for start in starts[:-1]:
            self._read(chunk, start, start + size)
            out, self._out = self._out, []
            yield out
        self._read(chunk, starts[-1], n)
        yield self._end_chunk(chunk)

    def feed_joined(self, chunks: Sequence[Chunk]) -> list[ev.Event]:
        """The events of :meth:`feed` for each of ``chunks`` in turn, for an answer that is only
        folded (:meth:`app.engine.stream.EventStream.coalesce`): the body tokens of one part
        that come in a row are decoded together and become one delta where :meth:`feed` made
        one a token (what ``EventStream`` joins them into anyway; text with logprobs is read
        token by token).  Joined adjacent deltas of one part equal, tested on random streams."""
        out: list[ev.Event] = []
        owed = False  # the events of the chunks read so far are in ``_out``, not yet in ``out``
        pending = self._joined  # body bytes read and not yet decoded
        for chunk in chunks:
            if self._done:  # as feed: only a late chunk's usage
                if owed:
                    self._flush_joined()
                    out += self._out
                    self._out = []
                    owed = False
                out += self._acct.late(chunk)
                continue
            owed = True
            ids = chunk.token_ids
            if chunk.logprobs or self._pending_logprobs:
                if pending:
                    self._flush_joined()
                self._read(chunk, 0, len(ids))
            else:
                self._read_joined(ids)
            if chunk.usage is not None or chunk.finish is not None:
                if pending:
                    self._flush_joined()
                self._end_usage(chunk)
        if owed:
            if pending:
                self._flush_joined()
            out += self._out
            self._out = []
        return out

    def _read_joined(self, ids: tuple[int, ...]) -> None:
        """:meth:`_read` of a whole chunk without logprobs, a body token's bytes kept in
        ``_joined`` until something else happens (any other token, the chunk's finish, the
        end of :meth:`feed_joined`)."""
        pending = self._joined
        acct = self._acct
        for tok in ids:
            if self._stop_token is not None:
                break  # nothing after a stop token belongs to this answer
            acct.completion_tokens += 1
            if self._state is _State.BODY and tok not in _TERMINATORS:
                if self._kind == "reasoning":
                    acct.reasoning_tokens += 1
                data = KNOWN_BYTES.get(tok)
                pending.append(data if data is not None else token_bytes(tok))
                continue
            if pending:
                self._flush_joined()
            self._step(tok, None)

    def _flush_joined(self) -> None:
        """The body bytes kept by :meth:`_read_joined`, decoded as one delta."""
        delta = self._body.decode(b"".join(self._joined))
        self._joined.clear()
        if delta:
            self._emit_delta(delta)

    def _read(self, chunk: Chunk, start: int, end: int) -> None:
        """The chunk's token ids ``start:end``."""
        ids = chunk.token_ids
        lps = chunk.logprobs if chunk.logprobs and len(chunk.logprobs) == len(ids) else None
        for i in range(start, end):
            if self._stop_token is not None:
                break  # nothing after a stop token belongs to this answer
            self._acct.completion_tokens += 1
            self._step(ids[i], lps[i] if lps else None)

    def _end_chunk(self, chunk: Chunk) -> list[ev.Event]:
        """The chunk's usage and finish, after its ids; every event the chunk produced."""
        self._end_usage(chunk)
        out, self._out = self._out, []
        return out

    def _end_usage(self, chunk: Chunk) -> None:
        """The chunk's usage and finish, after its ids."""
        if chunk.usage is not None:
            self._acct.backend = chunk.usage
        if chunk.finish is not None:
            reason = self._finish(chunk.finish)
            if reason is not None:
                self._out.extend(self._acct.hold(reason, chunk))

    def close(self) -> list[ev.Event]:
        """The backend stream ended; a missing finish is a truncation error."""
        if self._acct.pending is not None:
            self._out.extend(self._acct.drain())
        elif not self._done:
            self._done = True
            self._out.append(ev.Error("The backend stream ended before the model finished "
                                      "its answer (no stop token).", code="stream_truncated"))
        out, self._out = self._out, []
        return out

    # -- internals ----------------------------------------------------------------
    def _step(self, tok: int, logprob: TokenLogprob | None) -> None:
        state = self._state
        if state is _State.BODY:
            if tok in _TERMINATORS:
                if tok != END:
                    self._stop_token = tok
                tail = self._body.decode(b"", True)  # a character the body ended inside of
                self._body.reset()
                if tail:
                    self._emit_delta(tail)
                self._state = _State.EXPECT_START
                self._close_message()
                return
            kind = self._kind
            if kind == "reasoning":
                self._acct.reasoning_tokens += 1
            elif logprob is not None and kind == "text":
                self._pending_logprobs.append(logprob)
            delta = self._body.decode(token_bytes(tok))
            if delta:
                self._emit_delta(delta)
        elif state is _State.HEADER:
            if tok == MESSAGE:
                header = decode_header(self._header, self._role)
                self._header, self._role = [], None
                self._state = _State.BODY
                self._open_message(header.role, header.channel, header.recipient)
            elif tok in _TERMINATORS:  # a header without a body: skipped, as openai-harmony does
                if self._role is not None and self._header:
                    decode_header(self._header, self._role, complete=False)  # may fail
                if tok != END:
                    self._stop_token = tok
                self._header, self._role = [], None
                self._state = _State.EXPECT_START
            else:
                self._header.append(tok)
        elif tok == START:
            self._state = _State.HEADER
        else:
            raise HarmonyFormatError(f"Unexpected token {tok} while expecting start token {START}")

    def _open_message(self, role: str, channel: str | None, recipient: str | None) -> None:
        if role != "assistant":
            # The model began a turn that is not its own (``<|start|>user``...): what it writes
            # there is fabricated and never part of the answer, which ends here.
            self._kind = None
            self._stop_token = END
            if not self._done:
                self._done = True
                self._acct.pending = "stop"
                self._out.append(self._acct.release())
            return
        if recipient and recipient.startswith(CONSTRAIN_MARKER):
            # "final <|constrain|>json": a content type alone, which openai-harmony's header
            # rule reads as the recipient; gpt-oss writes it for a structured answer
            recipient = None
        space, _, short = (recipient or "").partition(".")
        if recipient and recipient.startswith("functions."):
            self._kind = "tool"
            self._parts.start_call(recipient.removeprefix("functions."), self._out)
        elif short and space in self._namespaces:
            self._kind = "tool"
            self._parts.start_call(f"{space}__{short}", self._out)
        elif recipient == "python" and "python" in self._builtins:  # the code itself, not JSON
            self._kind = "tool"
            self._parts.start_call("python", self._out)
        elif recipient and recipient != "assistant":
            self._kind = "unsupported"
            self._out.append(ev.Error(f"The model addressed {recipient!r}, a built-in tool this "
                                      "gateway does not provide.", code="unsupported_recipient"))
            self._done = True
        elif recipient == "assistant":
            self._kind = "reasoning"  # the model writing to itself: never for the user
        elif channel == "commentary":
            self._kind = "preamble"
        elif channel == "final":
            self._kind = "text"
        else:  # analysis, no channel at all, or a channel Harmony does not define
            self._kind = "reasoning"

    def _emit_delta(self, delta: str) -> None:
        if self._done:
            return
        kind = self._kind
        if kind == "text":
            lps = tuple(self._pending_logprobs) if self._pending_logprobs else None
            self._pending_logprobs = []
            self._parts.delta("text", delta, self._out, lps)
        elif kind in ("reasoning", "preamble"):
            self._parts.delta(kind, delta, self._out)  # type: ignore[arg-type]
        elif kind == "tool":
            self._parts.arguments(delta, self._out)

    def _close_message(self) -> None:
        kind, self._kind = self._kind, None
        if self._done:
            return
        if kind == "tool":
            self._parts.end_call(self._out)
        else:
            self._parts.close(self._out)

    def usage(self) -> Usage:
        return self._acct.usage()

    def _finish(self, finish: Finish) -> ev.FinishReason | None:
        """Close the open part; the finish reason, or None after an error event."""
        if self._done:
            return None
        self._done = True
        if finish.kind == "length":
            self._parts.close(self._out)  # an unfinished call stays open: the budget cut it
            return "length"
        if self._stop_token == CALL and self._parts.calls:
            return "tool_calls"
        if self._stop_token is not None or finish.kind == "stop_string":
            self._parts.close(self._out)
            return "stop"
        self._out.append(ev.Error("The backend reported end of generation without a Harmony "
                                  "stop token; the answer is incomplete.", code="stream_truncated"))
        return None
