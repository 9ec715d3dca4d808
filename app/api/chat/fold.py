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
    call_id: str
    name: str
    arguments: str = ""


@dataclass(slots=True)
class Folded:
    reasoning: str = ""
    preamble: str = ""
    text: str = ""
    content: str = ""  # preambles and answer text in the order they streamed
    tool_calls: list[FoldedToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: ev.FinishReason | None = None
    usage: Usage = field(default_factory=Usage)
    error: ev.Error | None = None

    def add(self, event: ev.Event) -> None:
        if isinstance(event, ev.ReasoningDelta):
            self.reasoning += event.text
        elif isinstance(event, ev.PreambleDelta):
            self.preamble += event.text
            self.content += event.text
        elif isinstance(event, ev.TextDelta):
            self.text += event.text
            self.content += event.text
            if event.logprobs:
                self.logprobs.extend(event.logprobs)
        elif isinstance(event, ev.ToolCallStarted):
            self.tool_calls.append(FoldedToolCall(event.call_id, event.name))
        elif isinstance(event, ev.ToolCallArgumentsDelta):
            self.tool_calls[-1].arguments += event.delta
        elif isinstance(event, ev.ToolCallDone):
            self.tool_calls[-1].arguments = event.arguments
        elif isinstance(event, ev.Finished):
            self.finish_reason = event.reason
            self.usage = event.usage
        elif isinstance(event, ev.Error):
            self.error = event
