"""Wraps a pure :class:`app.parse.base.TextDecoder` into a pipeline :class:`EventParser`.

The decoder only sees text; this wrapper owns everything about chunks: completion and
reasoning token counts, the backend's ``Finish`` (mapped to an :data:`EndKind`),
usage that arrives in the same chunk as the finish (llama.cpp) or a later one (vLLM),
and exactly one terminal event.
"""

from __future__ import annotations

from app import events as ev
from app.model import Chunk, Usage
from app.parse.base import EndKind, TextDecoder


class TextEventParser:
    def __init__(self, decoder: TextDecoder, prompt_tokens: int) -> None:
        self._decoder = decoder
        self._prompt_tokens = prompt_tokens
        self._completion_tokens = 0
        self._reasoning_tokens = 0
        self._usage: Usage | None = None
        self._pending: ev.FinishReason | None = None  # Finished held until usage arrives
        self._done = False

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            if self._pending is not None and chunk.usage is not None:
                self._usage = chunk.usage
                return [self._release()]
            return []
        out: list[ev.Event] = []
        n_tokens = len(chunk.token_ids) or (1 if chunk.text else 0)
        self._completion_tokens += n_tokens
        if chunk.text and self._decoder.stopped is None:
            events = self._decoder.decode(chunk.text)
            if any(isinstance(e, ev.ReasoningDelta) for e in events):
                self._reasoning_tokens += n_tokens
            out.extend(events)
            if self._terminal(out):
                return out
        if chunk.usage is not None:
            self._usage = chunk.usage
        if chunk.finish is not None:
            kind = chunk.finish.kind
            out.extend(self._end("eos" if kind == "tool_calls" else kind))
            if self._pending is not None and chunk.usage is not None:
                out.append(self._release())
        return out

    def close(self) -> list[ev.Event]:
        if self._pending is not None:
            return [self._release()]
        if self._done:
            return []
        return self._end("closed") + ([self._release()] if self._pending is not None else [])

    def usage(self) -> Usage:
        u = self._usage
        return Usage(
            prompt_tokens=u.prompt_tokens if u and u.prompt_tokens else self._prompt_tokens,
            completion_tokens=u.completion_tokens if u and u.completion_tokens
            else self._completion_tokens,
            reasoning_tokens=min(self._reasoning_tokens, u.completion_tokens)
            if u and u.completion_tokens else self._reasoning_tokens,
            cached_tokens=u.cached_tokens if u else 0,
        )

    def _terminal(self, events: list[ev.Event]) -> bool:
        if any(isinstance(e, ev.Error) for e in events):
            self._done = True
            return True
        return False

    def _end(self, end: EndKind) -> list[ev.Event]:
        self._done = True
        if self._decoder.stopped is not None:
            end = "eos"  # the text itself said how it ended
        events, reason = self._decoder.flush(end)
        if any(isinstance(e, ev.Error) for e in events):
            return events
        if reason is None:
            events.append(ev.Error("The backend stream ended before the model finished its "
                                   "answer (no stop marker).", code="stream_truncated"))
            return events
        self._pending = reason
        return events

    def _release(self) -> ev.Finished:
        assert self._pending is not None
        reason, self._pending = self._pending, None
        return ev.Finished(reason, self.usage())
