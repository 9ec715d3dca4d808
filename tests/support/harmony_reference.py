"""The Harmony parser as it was built on openai-harmony's ``StreamableParser``: the oracle
of the differential tests in ``tests/unit/formats/harmony/test_parse_equivalence.py``.

``app.formats.harmony.parse`` now tracks Harmony's message structure by token id itself
(openai-harmony's parser costs ~12 µs per token and ~0.15 ms per parser); this copy of the
previous implementation (commit f2acde9) pins that the two produce the same events for every
well-formed and malformed token stream whose message bodies are valid UTF-8.
"""

from __future__ import annotations

from openai_harmony import Role, StreamableParser, StreamState

from app.core import events as ev
from app.core.output import Chunk, Finish, TokenLogprob, Usage
from app.formats.harmony.vocab import CALL, END, RETURN, harmony_encoding
from app.formats.parsing.accounting import Accounting
from app.formats.parsing.parts import Parts

FIRST_SPECIAL = 199998  # o200k: ids from here on are special / control tokens

_TERMINATORS = frozenset({END, RETURN, CALL})
_Kind = str  # "reasoning" | "preamble" | "text" | "tool" | "unsupported"


class ReferenceHarmonyParser:
    def __init__(self, prompt_tokens: int, prefill: tuple[int, ...] = ()) -> None:
        self._parser = StreamableParser(harmony_encoding(), Role.ASSISTANT, strict=False)
        self._acct = Accounting(prompt_tokens)
        self._in_content = False
        self._parts = Parts()
        self._kind: _Kind | None = None
        self._stop_token: int | None = None
        self._done = False
        self._pending_logprobs: list[TokenLogprob] = []
        self._out: list[ev.Event] = []
        for tok in prefill:  # a forced header: may open a tool call, emitted on first feed
            self._step(tok, None)

    # -- public API ---------------------------------------------------------------
    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)  # vLLM sends usage in a chunk after the finish
        lps = chunk.logprobs if chunk.logprobs and len(chunk.logprobs) == len(chunk.token_ids) else None
        for i, tok in enumerate(chunk.token_ids):
            if self._stop_token is not None:
                break  # nothing after a stop token belongs to this answer
            self._acct.completion_tokens += 1
            self._step(tok, lps[i] if lps else None)
        if chunk.usage is not None:
            self._acct.backend = chunk.usage
        if chunk.finish is not None:
            reason = self._finish(chunk.finish)
            if reason is not None:
                self._out.extend(self._acct.hold(reason, chunk))
        out, self._out = self._out, []
        return out

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
        p = self._parser
        # A content token is one read while a message body is open and that does not
        # close it; only those count as reasoning tokens or carry answer logprobs.
        was_content = self._in_content
        is_content = was_content and tok not in _TERMINATORS
        p.process(tok)
        if tok >= FIRST_SPECIAL:
            # Only special tokens move the parser between header and content.  Its
            # ``state`` getter serializes the whole parser state, so it is read here only.
            self._in_content = p.state == StreamState.CONTENT
        if tok in (RETURN, CALL):
            self._stop_token = tok
        if self._in_content and not was_content:
            self._open_message()
        if is_content and self._kind == "reasoning":
            self._acct.reasoning_tokens += 1
        if is_content and logprob is not None and self._kind == "text":
            self._pending_logprobs.append(logprob)
        if self._in_content:
            delta = p.last_content_delta
            if delta:
                self._emit_delta(delta)
        elif was_content:
            self._close_message()

    def _open_message(self) -> None:
        p = self._parser
        recipient = p.current_recipient
        channel = p.current_channel
        if p.current_role not in (None, Role.ASSISTANT):
            # The model began a turn that is not its own (``<|start|>user``...): what it writes
            # there is fabricated and never part of the answer, which ends here.
            self._kind = None
            self._stop_token = END
            if not self._done:
                self._done = True
                self._acct.pending = "stop"
                self._out.append(self._acct.release())
            return
        if recipient and recipient.startswith("functions."):
            self._kind = "tool"
            self._parts.start_call(recipient.removeprefix("functions."), self._out)
        elif recipient and recipient != "assistant":
            self._kind = "unsupported"
            self._out.append(ev.Error(f"The model addressed {recipient!r}, a built-in tool this "
                                      "gateway does not provide.", code="unsupported_recipient"))
            self._done = True
        elif channel == "commentary":
            self._kind = "preamble"
        elif channel in (None, "final"):
            self._kind = "text"
        else:
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
