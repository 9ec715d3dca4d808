"""Events → OpenAI Chat Completions (``chat.completion`` and ``chat.completion.chunk``).

Mapping: reasoning → ``reasoning_content`` (never ``content``); preambles and final
text → ``content`` (both are user-visible by design); tool calls → ``tool_calls``
(stream: index, id, type and name first, then argument fragments).

``wire=True`` (the streamed SSE route): the common deltas (``content`` of answer and preamble
text without logprobs, ``reasoning_content``, a tool call's ``function.arguments`` fragment)
leave as pre-encoded frames, made from a per-stream prefix and suffix and the piece's JSON
string (:mod:`app.api.chat.wire`), byte for byte what their chunk dicts encode to with
:func:`~app.http.sse.data_event`; consecutive ones of one field join one
:class:`~app.api.chat.wire.Deltas` payload while it waits for the SSE sender (``join``; not
for ``n > 1``, whose choices share one queue).  Every other chunk (the role chunk, a tool call's
start, the finish and usage chunks, logprobs, errors) stays a dict.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.api.chat.fold import Folded
from app.api.chat.wire import Cut, Deltas, delta_frame
from app.api.logprobs import logprobs_content
from app.core import events as ev
from app.core.errors import error_body
from app.core.output import Usage


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class ChatEncoder:
    """One chat completion: each event becomes zero or more ``chat.completion.chunk`` dicts
    (when ``stream``), and every event is folded, so :meth:`result` is the
    ``chat.completion`` the same stream amounts to."""

    def __init__(self, response_id: str, model: str, created: int, *, include_usage: bool,
                 logprobs: bool, top_logprobs: int = 0, stream: bool = True,
                 index: int = 0, wire: bool = False, join: bool = True) -> None:
        self._base = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                      "model": model}
        self._ids = (response_id, model, created)
        self._include_usage = include_usage
        self._logprobs = logprobs
        self._top = top_logprobs
        self._stream = stream
        self._index = index  # the choice this encoder writes (n > 1: one encoder per choice)
        self.folded = Folded()
        self.terminal = False
        # wire: the frames of this stream's deltas cut around the piece's JSON string, by field
        # ("content", "reasoning_content") or tool call index
        self._frames: dict[str | int, Cut] | None = {} if wire and stream else None
        self._join = join  # consecutive deltas not yet taken as one payload (not for n > 1 choices)
        self._pending: Deltas | None = None  # wire: the last deltas returned, while not yet taken

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               logprobs: Any = None) -> dict[str, Any]:
        return {**self._base, "choices": [{"index": self._index, "delta": delta, "logprobs": logprobs,
                                           "finish_reason": finish}]}

    def start(self) -> list[dict[str, Any]]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def encode(self, event: ev.Event) -> list[dict[str, Any]]:
        if self.terminal:
            return []
        self.folded.add(event)
        if self._frames is not None:  # a common delta: its frame
            key: str | int
            if (type(event) is ev.TextDelta and not self._logprobs) or type(event) is ev.PreambleDelta:
                key, text = "content", event.text
            elif type(event) is ev.ReasoningDelta:
                key, text = "reasoning_content", event.text
            elif type(event) is ev.ToolCallArgumentsDelta:
                key, text = event.index, event.delta
            else:
                key = ""
            if key != "":
                cut = self._frames.get(key) or self._frame(key)
                pending = self._pending
                if pending is not None and pending.cut is cut and not pending.taken:
                    pending.pieces.append(orjson.dumps(text))
                    return []
                deltas = Deltas(cut, orjson.dumps(text))
                self._pending = deltas if self._join else None
                return [deltas]
            self._pending = None
        if isinstance(event, ev.TERMINAL):
            self.terminal = True
        return self._chunks(event) if self._stream else []

    def cancel(self) -> list[dict[str, Any]]:
        """The client is gone: nothing more to say."""
        self.terminal = True
        return []

    def _frame(self, key: str | int) -> Cut:
        delta: dict[str, Any] = ({key: ""} if isinstance(key, str) else
                                 {"tool_calls": [{"index": key, "function": {"arguments": ""}}]})
        assert self._frames is not None
        cut = self._frames[key] = delta_frame(self._chunk(delta))
        return cut

    def unstored(self, error: ev.Error, held: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A stored completion's end could not be stored: its error chunk instead of the held
        end (the finish chunk never sent)."""
        return [error_body(error.message, error.type, error.code, error.param)] if self._stream else []

    def result(self) -> dict[str, Any]:
        return completion_body(self.folded, *self._ids, logprobs=self._logprobs, top=self._top,
                               index=self._index)

    def _chunks(self, event: ev.Event) -> list[dict[str, Any]]:
        if isinstance(event, ev.ReasoningDelta):
            return [self._chunk({"reasoning_content": event.text})]
        if isinstance(event, ev.PreambleDelta):
            return [self._chunk({"content": event.text})]
        if isinstance(event, ev.TextDelta):
            lp = None
            if self._logprobs:
                lp = {"content": logprobs_content(event.logprobs or (), self._top)}
            return [self._chunk({"content": event.text}, logprobs=lp)]
        if isinstance(event, ev.ToolCallStarted):
            return [self._chunk({"tool_calls": [{
                "index": event.index, "id": event.call_id, "type": "function",
                "function": {"name": event.name, "arguments": ""}}]})]
        if isinstance(event, ev.ToolCallArgumentsDelta):
            return [self._chunk({"tool_calls": [{"index": event.index,
                                                 "function": {"arguments": event.delta}}]})]
        if isinstance(event, ev.Finished):
            out = [self._chunk({}, finish=event.reason)]
            if self._include_usage:
                out.append({**self._base, "choices": [], "usage": usage_dict(event.usage)})
            return out
        if isinstance(event, ev.Error):
            return [error_body(event.message, event.type, event.code, event.param)]
        return []  # PartDone, ToolCallDone: nothing to send in Chat Completions


def completion_body(folded: Folded, response_id: str, model: str, created: int, *,
                    logprobs: bool, top: int = 0, index: int = 0) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": folded.content or None}
    if folded.reasoning:
        message["reasoning_content"] = folded.reasoning
    if folded.tool_calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in folded.tool_calls
        ]
    choice = {
        "index": index,
        "message": message,
        "logprobs": {"content": logprobs_content(folded.logprobs, top)} if logprobs else None,
        "finish_reason": folded.finish_reason,
    }
    return {"id": response_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [choice], "usage": usage_dict(folded.usage)}


def sum_usage(usages: list[Usage]) -> Usage:
    """The usage of several choices: each was its own generation of the prompt."""
    return Usage(sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages),
                 sum(u.reasoning_tokens for u in usages), sum(u.cached_tokens for u in usages))


def merge_choices(bodies: list[dict[str, Any]], usages: list[Usage]) -> dict[str, Any]:
    """One ``chat.completion`` of the choices' bodies (each with its own index)."""
    merged = dict(bodies[0])
    merged["choices"] = [body["choices"][0] for body in bodies]
    merged["usage"] = usage_dict(sum_usage(usages))
    return merged
