"""Where a chat-template model's answer starts, read from its output text as it streams.

A response format constrains only the answer (:mod:`app.engine.constrained`): the
reasoning before it (``<think>...</think>``, or a reasoning the prompt opened) stays free,
and a tool call is never constrained, so a model given tools and a response format may
call a tool or answer in the schema.  :class:`TemplateAnswerWatch` follows the output:

* in reasoning (the prompt opened it, or the output starts with the reasoning marker): the
  answer starts right after the chunk that ends the reasoning;
* at the start: text that could still become the reasoning marker or a tool call's opening
  marker is held back; a tool call ends the watch (nothing is constrained); anything else
  means the answer has started *unconstrained*, so it is dropped (:data:`RESTART`) and
  generated again under the schema.

A template whose reasoning the prompt closed, and that was given no tools, is constrained
from its first token; so is one with neither reasoning nor tools (the format then sets
``Prompt.json_schema`` itself and no watch is used).
"""

from __future__ import annotations

from app.core.answer import HOLD, RESTART, Cut
from app.core.output import Chunk
from app.formats.template.analysis.result import ReasoningMode, TemplateAnalysis
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.forced import in_reasoning

_MAX_UNDECIDED = 256  # characters held back at the start before the answer is taken as begun


def call_triggers(a: TemplateAnalysis) -> tuple[str, ...]:
    """The markers a tool call (or a section of them) opens with; () when calls are bare JSON."""
    t = a.tools
    if t.format is ToolFormat.NONE:
        return ()
    opener = t.per_call_start if t.format is ToolFormat.JSON_NATIVE else t.call_open
    return tuple(m for m in (t.section_start, opener) if m)


class TemplateAnswerWatch:
    def __init__(self, analysis: TemplateAnalysis, prompt_tail: str, tools: bool) -> None:
        self._start = analysis.reasoning.start
        self._end = analysis.reasoning.end
        self._triggers = call_triggers(analysis) if tools else ()
        self._reasoning = in_reasoning(analysis, prompt_tail)
        self._done = False
        self._buf = ""
        prompt_closed = bool(self._end) and prompt_tail.rstrip().endswith(self._end)
        no_reasoning = analysis.reasoning.mode is ReasoningMode.NONE or prompt_closed
        self._at_start = not self._reasoning and no_reasoning and not self._triggers

    def at_start(self) -> bool:
        return self._at_start

    def feed(self, chunk: Chunk) -> Cut:
        if self._done:
            return None
        self._buf += chunk.text
        if self._reasoning:
            found = self._buf.find(self._end) if self._end else -1
            if found < 0:
                self._buf = self._buf[-len(self._end):] if self._end else ""
                return None
            self._done = True
            return len(chunk.token_ids)  # the answer starts after the chunk ending the reasoning
        text = self._buf.lstrip()
        if not text:
            return HOLD
        if self._start and text.startswith(self._start):
            self._reasoning = True
            self._buf = text[len(self._start):]
            return self.feed(Chunk(token_ids=chunk.token_ids)) if self._end in self._buf else None
        if any(text.startswith(t) for t in self._triggers):
            self._done = True  # a tool call: never constrained
            return None
        could_be = [m for m in (self._start, *self._triggers) if m and m.startswith(text)]
        if could_be and len(text) < _MAX_UNDECIDED:
            return HOLD
        self._done = True
        return RESTART
