"""Wraps a pure :class:`app.formats.parsing.base.TextDecoder` into a pipeline :class:`EventParser`.

The decoder only sees text; this wrapper owns everything about chunks: completion and
reasoning token counts, the backend's ``Finish`` (mapped to an :data:`EndKind`),
usage that arrives in the same chunk as the finish (llama.cpp) or a later one (vLLM),
exactly one terminal event, and the tokens' logprobs: a chunk's tokens go with the answer
text the decoder released for them (held back while a marker may be forming, dropped when
their text became reasoning, and a token whose text is not in the released answer text, a
marker, is left out).
"""

from __future__ import annotations

import dataclasses

from app.core import events as ev
from app.core.output import Chunk, TokenLogprob, Usage
from app.formats.parsing.accounting import Accounting
from app.formats.parsing.base import EndKind, TextDecoder


class TextEventParser:
    def __init__(self, decoder: TextDecoder, prompt_tokens: int) -> None:
        self._decoder = decoder
        self._acct = Accounting(prompt_tokens)
        self._done = False
        self._logprobs: list[TokenLogprob] = []  # tokens whose text the decoder still holds

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)
        out: list[ev.Event] = []
        n_tokens = len(chunk.token_ids) or (1 if chunk.text else 0)
        self._acct.completion_tokens += n_tokens
        if chunk.text and self._decoder.stopped is None:
            if chunk.logprobs:
                self._logprobs.extend(chunk.logprobs)
            events = self._decoder.decode(chunk.text)
            if any(isinstance(e, ev.ReasoningDelta) for e in events):
                self._acct.reasoning_tokens += n_tokens
            out.extend(self._with_logprobs(events) if self._logprobs else events)
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

    def _with_logprobs(self, events: list[ev.Event]) -> list[ev.Event]:
        """The held tokens' logprobs on the last answer text these events release."""
        last = next((i for i in range(len(events) - 1, -1, -1)
                     if isinstance(events[i], ev.TextDelta)), None)
        if last is None:
            if any(isinstance(e, ev.ReasoningDelta | ev.ToolCallStarted) for e in events):
                self._logprobs = []  # their text was reasoning or a call, not the answer
            return events
        text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
        # Text is released in order: a token whose text is in it is released; one after the
        # last released may still be held (part of its text not yet out); one before it that
        # is not in the text never will be (a marker, or text that was not the answer).
        released = [(lp.token.strip() or lp.token) in text for lp in self._logprobs]
        cut = max((i for i, r in enumerate(released) if r), default=-1) + 1
        mine = tuple(lp for lp, r in zip(self._logprobs[:cut], released, strict=False) if r)
        self._logprobs = self._logprobs[cut:]
        delta = events[last]
        assert isinstance(delta, ev.TextDelta)
        return [*events[:last], dataclasses.replace(delta, logprobs=mine or None),
                *events[last + 1:]]

    def usage(self) -> Usage:
        return self._acct.usage()

    def _end(self, end: EndKind, out: list[ev.Event]) -> ev.FinishReason | None:
        """Flush the decoder; the finish reason, or None when ``out`` got an Error."""
        self._done = True
        if self._decoder.stopped is not None:
            end = "eos"  # the text itself said how it ended
        events, reason = self._decoder.flush(end)
        out.extend(self._with_logprobs(events) if self._logprobs else events)
        if any(isinstance(e, ev.Error) for e in events):
            return None
        if reason is None:
            out.append(ev.Error("The backend stream ended before the model finished its "
                                "answer (no stop marker).", code="stream_truncated"))
        return reason
