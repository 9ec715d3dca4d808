"""Events from chat-mode backends, whose chunks are already separated by the server.

Ollama ``/api/chat`` and OpenAI-compatible upstreams return answer ``content``,
``reasoning`` (``reasoning_content`` / ``reasoning`` / ``thinking``) and structured
``tool_calls`` deltas.  This parser turns those :class:`app.model.Chunk` fields into
the same events the token and text parsers produce: parts open and close in order,
tool calls get stable ids (the upstream's, or generated), and a stream without a
finish is a truncation error.
"""

from __future__ import annotations

from app import events as ev
from app.ids import random_id
from app.model import Chunk, Finish, Usage


class DeltaParser:
    def __init__(self, prompt_tokens: int) -> None:
        self._prompt_tokens = prompt_tokens
        self._completion_tokens = 0
        self._reasoning_tokens = 0
        self._usage: Usage | None = None
        self._part: ev.PartKind | None = None
        self._calls: dict[int, tuple[int, str, str, list[str]]] = {}  # upstream idx → ours
        self._open_call: int | None = None
        self._pending: ev.FinishReason | None = None
        self._done = False

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            if self._pending is not None and chunk.usage is not None:
                self._usage = chunk.usage
                return [self._release()]
            return []
        out: list[ev.Event] = []
        if chunk.reasoning:
            self._switch("reasoning", out)
            self._reasoning_tokens += max(len(chunk.token_ids), 1)
            out.append(ev.ReasoningDelta(chunk.reasoning))
        if chunk.text:
            self._switch("text", out)
            out.append(ev.TextDelta(chunk.text, chunk.logprobs))
        for call in chunk.tool_calls:
            self._switch(None, out)
            known = self._calls.get(call.index)
            if known is None:
                if not call.name:
                    continue  # arguments before a name: nothing to attach them to yet
                self._close_call(out)
                ours = len(self._calls)
                known = (ours, call.id or random_id("call_"), call.name, [])
                self._calls[call.index] = known
                self._open_call = call.index
                out.append(ev.ToolCallStarted(ours, known[1], known[2]))
            elif self._open_call != call.index:
                continue  # a late fragment of an already closed call is ignored
            if call.arguments:
                known[3].append(call.arguments)
                out.append(ev.ToolCallArgumentsDelta(known[0], call.arguments))
        self._completion_tokens += len(chunk.token_ids) or (
            1 if chunk.text or chunk.reasoning or chunk.tool_calls else 0)
        if chunk.usage is not None:
            self._usage = chunk.usage
        if chunk.finish is not None:
            out.extend(self._end(chunk.finish))
            if chunk.usage is not None and self._pending is not None:
                out.append(self._release())
        return out

    def close(self) -> list[ev.Event]:
        if self._pending is not None:
            return [self._release()]
        if self._done:
            return []
        self._done = True
        return [ev.Error("The backend stream ended before the model finished its answer.",
                         code="stream_truncated")]

    def usage(self) -> Usage:
        u = self._usage
        return Usage(
            prompt_tokens=u.prompt_tokens if u and u.prompt_tokens else self._prompt_tokens,
            completion_tokens=u.completion_tokens if u and u.completion_tokens
            else self._completion_tokens,
            reasoning_tokens=u.reasoning_tokens if u and u.reasoning_tokens
            else self._reasoning_tokens,
            cached_tokens=u.cached_tokens if u else 0,
        )

    def _switch(self, part: ev.PartKind | None, out: list[ev.Event]) -> None:
        if part is not None:
            self._close_call(out)
        if self._part is not None and self._part != part:
            out.append(ev.PartDone(self._part))
        self._part = part

    def _close_call(self, out: list[ev.Event]) -> None:
        if self._open_call is None:
            return
        ours, call_id, name, args = self._calls[self._open_call]
        self._open_call = None
        out.append(ev.ToolCallDone(ours, call_id, name, "".join(args)))

    def _end(self, finish: Finish) -> list[ev.Event]:
        self._done = True
        out: list[ev.Event] = []
        self._switch(None, out)
        self._close_call(out)
        if finish.kind == "length":
            self._pending = "length"
        elif self._calls:
            self._pending = "tool_calls"
        else:
            self._pending = "stop"
        return out

    def _release(self) -> ev.Finished:
        assert self._pending is not None
        reason, self._pending = self._pending, None
        return ev.Finished(reason, self.usage())
