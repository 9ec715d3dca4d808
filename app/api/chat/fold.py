"""Fold an event stream into one complete answer (the chat completion's non-streaming view).

:class:`app.api.chat.encode.ChatEncoder` folds every event it encodes, streamed or not, and
builds ``chat.completion`` from the fold; the Responses encoder's fold is its resource.
Either way a non-streaming body is the fold of the same stream, so the two views cannot
disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core import events as ev
from app.core.output import TokenLogprob, Usage


@dataclass(slots=True)
class FoldedToolCall:
    """Arguments kept as pieces too (one call's arguments can be a whole file an agent writes,
    100,000 deltas: ``+=`` took 4 s)."""

    call_id: str
    name: str
    _pieces: list[str] = field(default_factory=list)

    @property
    def arguments(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def add(self, delta: str) -> None:
        self._pieces.append(delta)

    def set(self, arguments: str) -> None:
        self._pieces = [arguments]


@dataclass(slots=True)
class Folded:
    """Text is kept as pieces and joined on read: one append per event, not a copy of all
    the text so far (``str +=`` on an attribute is quadratic over a long answer)."""

    tool_calls: list[FoldedToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: ev.FinishReason | None = None
    usage: Usage = field(default_factory=Usage)
    error: ev.Error | None = None
    _reasoning: list[str] = field(default_factory=list)
    _preamble: list[str] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    _content: list[str] = field(default_factory=list)  # preambles and answer text, in stream order

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def preamble(self) -> str:
        return "".join(self._preamble)

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def content(self) -> str:
        return "".join(self._content)

    def add(self, event: ev.Event) -> None:
        if isinstance(event, ev.ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ev.PreambleDelta):
            self._preamble.append(event.text)
            self._content.append(event.text)
        elif isinstance(event, ev.TextDelta):
            self._text.append(event.text)
            self._content.append(event.text)
            if event.logprobs:
                self.logprobs.extend(event.logprobs)
        elif isinstance(event, ev.ToolCallStarted):
            self.tool_calls.append(FoldedToolCall(event.call_id, event.name))
        elif isinstance(event, ev.ToolCallArgumentsDelta):
            self.tool_calls[-1].add(event.delta)
        elif isinstance(event, ev.ToolCallDone):
            self.tool_calls[-1].set(event.arguments)
        elif isinstance(event, ev.Finished):
            self.finish_reason = event.reason
            self.usage = event.usage
        elif isinstance(event, ev.Error):
            self.error = event
