"""Where a chat-template model's answer starts, read from its output text as it streams.

A response format constrains only the answer (:mod:`app.engine.constrained`): the
reasoning before it (``<think>...</think>``, or a reasoning the prompt opened) stays free,
and a tool call is never constrained, so a model given tools and a response format may
call a tool or answer in the schema.  :class:`TemplateAnswerWatch` follows the output:

* in reasoning (the prompt opened it, or the output starts with the reasoning marker): the
  chunk that ends it is passed on; without tools the answer starts right after it, with
  tools what follows is read exactly as the start of an output is;
* at the start (of the output, or after the reasoning): whitespace, and text that could
  still become the reasoning marker (only at the very start) or a call's opening marker, is
  held back.  A call's marker ends the watch: nothing is constrained and every held chunk
  is passed on; so does a marker after a short sentence (``Let me check.`` then
  ``<tool_call>``) within :data:`_MAX_UNDECIDED` characters, as the parser reads a call
  after text.  Anything else means the answer has started *unconstrained*: it is dropped
  (:data:`RESTART`) and generated again under the schema: at once when it opens JSON
  (``{``, ``[``), else at that bound, or when the generation ends before a call (an empty
  answer included).

A template whose reasoning the prompt closed, and that was given no tools, is constrained
from its first token; so is one with neither reasoning nor tools (the format then sets
``Prompt.json_schema`` itself and no watch is used).  Chunks are usually one token; text
after the reasoning's end in the chunk that ends it is passed on with it (a later restart
keeps it in the second prompt).
"""

from __future__ import annotations

from app.core.answer import HOLD, RESTART, Cut
from app.core.output import Chunk
from app.formats.template.analysis.result import ReasoningMode, TemplateAnalysis
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.forced import in_reasoning

_MAX_UNDECIDED = 256  # characters held back before a call before the answer is taken as begun


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
        self._first = not self._reasoning  # the reasoning marker may still open the output
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
        final = chunk.finish is not None
        if self._first:  # the very start: the output may open the reasoning
            text = self._buf.lstrip()
            if self._start and text.startswith(self._start):
                self._first, self._reasoning = False, True
                self._buf = text[len(self._start):]
            elif not final and (not text or self._start.startswith(text)):
                self._buf = text
                return HOLD
            else:
                self._first = False
                return self._after(final)
        if not self._reasoning:
            return self._after(final)
        if not self._end_reasoning():
            return None
        # this chunk ends the reasoning: it is passed on, and the answer starts after it
        if not self._triggers:
            self._done = True
            return len(chunk.token_ids)
        return len(chunk.token_ids) if self._after(final) == RESTART else None

    def _end_reasoning(self) -> bool:
        """Whether the reasoning's end marker is in the buffer (the buffer is then what
        follows it); otherwise keeps only what could be the start of the marker."""
        found = self._buf.find(self._end) if self._end else -1
        if found < 0:
            keep = len(self._end) - 1
            self._buf = self._buf[-keep:] if keep > 0 else ""
            return False
        self._reasoning = False
        self._buf = self._buf[found + len(self._end):]
        return True

    def _after(self, final: bool) -> Cut:
        """The output after the reasoning (or without one) so far: a call, undecided, or an
        answer to generate again under the schema."""
        text = self._buf = self._buf.lstrip()
        if any(t in text for t in self._triggers):
            self._done = True  # a tool call: never constrained
            return None
        if final:
            self._done = True
            return RESTART  # ended without a call: the answer is the schema's
        if not text or any(m.startswith(text) for m in self._triggers):
            return HOLD
        if text[0] in "{[" or len(text) >= _MAX_UNDECIDED or not self._triggers:
            self._done = True
            return RESTART
        return HOLD
