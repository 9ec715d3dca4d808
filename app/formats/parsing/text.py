"""Wraps a pure :class:`app.formats.parsing.base.TextDecoder` into a pipeline :class:`EventParser`.

The decoder only sees text; this wrapper owns everything about chunks: completion and
reasoning token counts, the backend's ``Finish`` (mapped to an :data:`EndKind`),
usage that arrives in the same chunk as the finish (llama.cpp) or a later one (vLLM),
exactly one terminal event, a huge chunk's text decoded a slice at a time
(:meth:`TextEventParser.feed_slices`), and the tokens' logprobs: a chunk's tokens go with the answer
text the decoder released for them (held back while a marker may be forming, dropped when
their text became reasoning, and a token whose text is not in the released answer text, a
marker, is left out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from app.core import events as ev
from app.core.output import Chunk, TokenLogprob, Usage
from app.formats.parsing.accounting import Accounting
from app.formats.parsing.base import EndKind, TextDecoder

SLICE_CHARS = 8192  # characters decoded between two chances to give the event loop back


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
        return self._end_chunk(chunk, out)

    def feed_slices(self, chunk: Chunk, size: int = SLICE_CHARS) -> Iterator[list[ev.Event]]:
        """:meth:`feed`, about ``size`` characters of text at a time: the events of each
        slice as soon as it is decoded, so the caller can give the event loop back between
        slices.  Where the chunk's logprobs spell its text, slices end on token boundaries
        and each takes its own tokens' logprobs (otherwise they go in with the first).  The
        token counts are the chunk's, as with :meth:`feed`."""
        if self._done or len(chunk.text) <= size or self._decoder.stopped is not None:
            yield self.feed(chunk)
            return
        n_tokens = len(chunk.token_ids) or 1
        self._acct.completion_tokens += n_tokens
        reasoning = False
        out: list[ev.Event] = []
        for i, (text, logprobs) in enumerate(_slices(chunk.text, chunk.logprobs, size)):
            if self._decoder.stopped is not None:
                break  # text after a stop marker is not passed in
            if i:
                yield out  # the previous slice's (the last one's go with the chunk's end)
            if logprobs:
                self._logprobs.extend(logprobs)
            events = self._decoder.decode(text)
            reasoning = reasoning or any(isinstance(e, ev.ReasoningDelta) for e in events)
            out = list(self._with_logprobs(events) if self._logprobs else events)
            if any(isinstance(e, ev.Error) for e in events):
                self._done = True
                break
        if reasoning:
            self._acct.reasoning_tokens += n_tokens
        yield out if self._done else self._end_chunk(chunk, out)

    def _end_chunk(self, chunk: Chunk, out: list[ev.Event]) -> list[ev.Event]:
        """The chunk's usage and finish, after its text (``out``: the events of that)."""
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


def _slices(text: str, logprobs: tuple[TokenLogprob, ...] | None, size: int,
            ) -> list[tuple[str, tuple[TokenLogprob, ...] | None]]:
    """``text`` in pieces of about ``size`` characters, each with the logprobs of its tokens:
    cut on token boundaries where the tokens spell the text, else every ``size`` characters
    with all the logprobs on the first piece."""
    if not logprobs or "".join(lp.token for lp in logprobs) != text:
        return [(text[i:i + size], logprobs if i == 0 else None) for i in range(0, len(text), size)]
    pieces: list[tuple[str, tuple[TokenLogprob, ...] | None]] = []
    start = end = first = 0
    for i, lp in enumerate(logprobs):
        end += len(lp.token)
        if end - start >= size:
            pieces.append((text[start:end], logprobs[first:i + 1]))
            start, first = end, i + 1
    if first < len(logprobs):  # the rest (its text may be empty: tokens without text)
        if start < len(text) or not pieces:
            pieces.append((text[start:], logprobs[first:]))
        else:
            last_text, last_lps = pieces[-1]
            pieces[-1] = (last_text, (*(last_lps or ()), *logprobs[first:]))
    return pieces
