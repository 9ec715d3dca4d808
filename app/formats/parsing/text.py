"""Wraps a pure :class:`app.formats.parsing.base.TextDecoder` into a pipeline :class:`EventParser`.

The decoder only sees text; this wrapper owns everything about chunks: completion and
reasoning token counts, the backend's ``Finish`` (mapped to an :data:`EndKind`),
usage that arrives in the same chunk as the finish (llama.cpp) or a later one (vLLM),
and exactly one terminal event.
"""

from __future__ import annotations

from app.core import events as ev
from app.core.output import Chunk, Usage
from app.formats.parsing.accounting import Accounting
from app.formats.parsing.base import EndKind, TextDecoder


class TextEventParser:
    def __init__(self, decoder: TextDecoder, prompt_tokens: int) -> None:
        self._decoder = decoder
        self._acct = Accounting(prompt_tokens)
        self._done = False

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)
        out: list[ev.Event] = []
        n_tokens = len(chunk.token_ids) or (1 if chunk.text else 0)
        self._acct.completion_tokens += n_tokens
        if chunk.text and self._decoder.stopped is None:
            events = self._decoder.decode(chunk.text)
            if any(isinstance(e, ev.ReasoningDelta) for e in events):
                self._acct.reasoning_tokens += n_tokens
            out.extend(events)
            if any(isinstance(e, ev.Error) for e in events):
                self._done = True
                return out
        if chunk.usage is not None:
            self._acct.backend = chunk.usage
        if chunk.finish is not None:
            kind = chunk.finish.kind
            reason = self._end("eos" if kind == "tool_calls" else kind, out)
            if reason is not None:
                out.extend(self._acct.hold(reason, chunk))
        return out

    def close(self) -> list[ev.Event]:
        if self._done:
            return self._acct.drain()
        out: list[ev.Event] = []
        reason = self._end("closed", out)
        if reason is not None:
            self._acct.pending = reason
        return out + self._acct.drain()

    def usage(self) -> Usage:
        return self._acct.usage()

    def _end(self, end: EndKind, out: list[ev.Event]) -> ev.FinishReason | None:
        """Flush the decoder; the finish reason, or None when ``out`` got an Error."""
        self._done = True
        if self._decoder.stopped is not None:
            end = "eos"  # the text itself said how it ended
        events, reason = self._decoder.flush(end)
        out.extend(events)
        if any(isinstance(e, ev.Error) for e in events):
            return None
        if reason is None:
            out.append(ev.Error("The backend stream ended before the model finished its "
                                "answer (no stop marker).", code="stream_truncated"))
        return reason
