"""Token accounting and the held-back ``Finished`` event, shared by every parser.

A parser knows *why* generation ended before it knows the final usage: llama.cpp sends
usage with its stop event, vLLM and OpenAI-compatible servers in a chunk of its own
after the finish.  :class:`Accounting` counts tokens as they stream, keeps the
backend's usage when it arrives, and holds the finish reason until usage is known or
the stream ends.
"""

from __future__ import annotations

from app.core import events as ev
from app.core.output import Chunk, Usage


class Accounting:
    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.reasoning_tokens = 0
        self.backend: Usage | None = None
        self.pending: ev.FinishReason | None = None

    def hold(self, reason: ev.FinishReason, chunk: Chunk) -> list[ev.Event]:
        """Generation ended with ``reason``; release it now if ``chunk`` carried usage."""
        self.pending = reason
        return [self.release()] if chunk.usage is not None else []

    def late(self, chunk: Chunk) -> list[ev.Event]:
        """A chunk after the finish: only usage matters (vLLM's trailing usage chunk)."""
        if self.pending is not None and chunk.usage is not None:
            self.backend = chunk.usage
            return [self.release()]
        return []

    def drain(self) -> list[ev.Event]:
        """The stream ended: release a held finish without waiting any longer."""
        return [self.release()] if self.pending is not None else []

    def release(self) -> ev.Finished:
        assert self.pending is not None
        reason, self.pending = self.pending, None
        return ev.Finished(reason, self.usage())

    def usage(self) -> Usage:
        """The backend's numbers where it sent them, the streamed counts otherwise."""
        u = self.backend
        completion = u.completion_tokens if u and u.completion_tokens else self.completion_tokens
        reasoning = u.reasoning_tokens if u and u.reasoning_tokens else self.reasoning_tokens
        return Usage(
            prompt_tokens=u.prompt_tokens if u and u.prompt_tokens else self.prompt_tokens,
            completion_tokens=completion,
            reasoning_tokens=min(reasoning, completion) if completion else reasoning,
            cached_tokens=u.cached_tokens if u else 0,
        )
