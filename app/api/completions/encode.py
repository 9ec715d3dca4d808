"""Events → OpenAI legacy Completions (``text_completion`` objects and stream chunks).

A stream is ``text_completion`` chunks with ``choices[0].text`` deltas, the last with
``finish_reason``; with ``stream_options.include_usage`` one more chunk with ``choices: []``
and ``usage``; an error after the first byte is ``{"error": {...}}``.  ``logprobs`` has the
legacy shape: ``tokens``, ``token_logprobs``, ``top_logprobs`` (one ``{token: logprob}`` per
token, at most the requested number) and ``text_offset`` (where each token starts in the
choice's text, echo included).  The non-streaming body is the fold of the same events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core import events as ev
from app.core.errors import error_body
from app.core.output import TokenLogprob, Usage


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}


class Logprobs:
    """The legacy logprobs object of one choice, built as tokens arrive."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.tokens: list[str] = []
        self.token_logprobs: list[float] = []
        self.top_logprobs: list[dict[str, float]] = []
        self.text_offset: list[int] = []

    def add(self, items: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
        """The tokens of one delta that starts at ``offset``; their own object (streams)."""
        part = Logprobs(self.top)
        for lp in items:
            part.tokens.append(lp.token)
            part.token_logprobs.append(lp.logprob)
            part.top_logprobs.append({t.token: t.logprob for t in lp.top[:self.top]})
            part.text_offset.append(offset)
            offset += len(lp.token)
        self.tokens += part.tokens
        self.token_logprobs += part.token_logprobs
        self.top_logprobs += part.top_logprobs
        self.text_offset += part.text_offset
        return part.body()

    def body(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "token_logprobs": self.token_logprobs,
                "top_logprobs": self.top_logprobs, "text_offset": self.text_offset}


class CompletionEncoder:
    """One completion choice (see the module docstring)."""

    def __init__(self, completion_id: str, model: str, created: int, *, include_usage: bool,
                 logprobs: int | None, echo: str = "", stream: bool = True, index: int = 0,
                 ) -> None:
        self._base = {"id": completion_id, "object": "text_completion", "created": created,
                      "model": model}
        self._include_usage = include_usage
        self._logprobs = Logprobs(logprobs) if logprobs is not None else None
        self._stream = stream
        self._echo = echo
        self.index = index
        self._text: list[str] = []
        self._length = 0
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.terminal = False

    def _chunk(self, text: str, finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        return {**self._base, "choices": [{"index": self.index, "text": text, "logprobs": logprobs,
                                           "finish_reason": finish}]}

    def _add(self, text: str, items: Sequence[TokenLogprob] | None) -> dict[str, Any]:
        lp = None
        if self._logprobs is not None:
            lp = self._logprobs.add(items or (), self._length)
        self._text.append(text)
        self._length += len(text)
        return self._chunk(text, logprobs=lp)

    def start(self) -> list[dict[str, Any]]:
        if not self._echo:
            return []
        chunk = self._add(self._echo, None)
        return [chunk] if self._stream else []

    def encode(self, event: ev.Event) -> list[dict[str, Any]]:
        if self.terminal:
            return []
        out: list[dict[str, Any]] = []
        if isinstance(event, ev.TextDelta):
            out.append(self._add(event.text, event.logprobs))
        elif isinstance(event, ev.Finished):
            self.terminal = True
            self.finish_reason = event.reason
            self.usage = event.usage
            empty = self._logprobs.add((), self._length) if self._logprobs is not None else None
            out.append(self._chunk("", event.reason, empty))
            if self._include_usage:
                out.append({**self._base, "choices": [], "usage": usage_dict(event.usage)})
        elif isinstance(event, ev.Error):
            self.terminal = True
            out.append(error_body(event.message, event.type, event.code, event.param))
        return out if self._stream else []

    def cancel(self) -> list[dict[str, Any]]:
        self.terminal = True
        return []

    def result(self) -> dict[str, Any]:
        choice = {"index": self.index, "text": "".join(self._text),
                  "logprobs": self._logprobs.body() if self._logprobs is not None else None,
                  "finish_reason": self.finish_reason}
        return {**self._base, "choices": [choice], "usage": usage_dict(self.usage)}


def merge(bodies: list[dict[str, Any]], usage: Usage) -> dict[str, Any]:
    """One ``text_completion`` of several choices' bodies (each with its own index)."""
    return {**bodies[0], "choices": [c for body in bodies for c in body["choices"]],
            "usage": usage_dict(usage)}


def total_usage(encoders: Sequence[CompletionEncoder], prompts: int) -> Usage:
    """Completion tokens of every choice; each prompt's tokens once (choices ``n`` apart
    share one prompt)."""
    per_prompt = len(encoders) // max(1, prompts)
    return Usage(
        prompt_tokens=sum(e.usage.prompt_tokens for e in encoders[::per_prompt or 1]),
        completion_tokens=sum(e.usage.completion_tokens for e in encoders),
        cached_tokens=sum(e.usage.cached_tokens for e in encoders[::per_prompt or 1]))
