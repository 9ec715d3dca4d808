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
from app.parse.accounting import Accounting


class DeltaParser:
    def __init__(self, prompt_tokens: int) -> None:
        self._acct = Accounting(prompt_tokens)
        self._part: ev.PartKind | None = None
        self._calls: dict[int, tuple[int, str, str, list[str]]] = {}  # upstream idx → ours
        self._open_call: int | None = None
        self._done = False

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)
        out: list[ev.Event] = []
        if chunk.reasoning:
            self._switch("reasoning", out)
            self._acct.reasoning_tokens += max(len(chunk.token_ids), 1)
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
        self._acct.completion_tokens += len(chunk.token_ids) or (
            1 if chunk.text or chunk.reasoning or chunk.tool_calls else 0)
        if chunk.usage is not None:
            self._acct.backend = chunk.usage
        if chunk.finish is not None:
            out.extend(self._end(chunk.finish))
            out.extend(self._acct.hold(self._reason(chunk.finish), chunk))
        return out

    def close(self) -> list[ev.Event]:
        if self._done:
            return self._acct.drain()
        self._done = True
        return [ev.Error("The backend stream ended before the model finished its answer.",
                         code="stream_truncated")]

    def usage(self) -> Usage:
        return self._acct.usage()

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
        return out

    def _reason(self, finish: Finish) -> ev.FinishReason:
        if finish.kind == "length":
            return "length"
        return "tool_calls" if self._calls else "stop"
