"""``tool_choice`` ``required`` / a named function on a chat template: the call is prefilled.

Harmony forces a call by prefilling the assistant header up to ``to=functions``; a template
model gets the same treatment in its own call syntax, read from the template's analysis:
the prompt ends with the opening of a tool call (and, for one allowed function in a tag
format, its name), so the model's next tokens are that call's name or arguments.  The
parser reads the prefill first (:class:`Prefilled`), as if the model had written it.

* a reasoning the prompt opened is closed first (the forced turn has no thinking, as with
  Harmony's prefilled header);
* the opening is what the template itself renders before a call's name (:func:`call_head`:
  ``<tool_call>\\n{"name": "``, ``<minimax:tool_call>\\n<invoke name="``,
  ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>``), plus the name when one
  function is forced; a template whose calls cannot be opened that way is not prefilled;
* a JSON template's call is prefilled up to its JSON object, and that object is constrained
  to the allowed functions' names and argument schemas (the backend's JSON-schema grammar),
  so even a tiny model writes a well-formed call of an allowed function;
* the tool guard still refuses a call of a function that is not allowed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core import events as ev
from app.core.conversation import Conversation, FunctionTool, GenerationParams, Message, TextPart, ToolCall
from app.formats.parsing.base import EndKind, TextDecoder
from app.formats.template.analysis.result import ReasoningMode, TemplateAnalysis
from app.formats.template.analysis.tools import ToolFormat


def in_reasoning(a: TemplateAnalysis, prompt_tail: str) -> bool:
    """Whether the output of a prompt ending in ``prompt_tail`` starts inside reasoning."""
    if a.reasoning.mode is ReasoningMode.DELIMITER:
        return True
    start, end = a.reasoning.start, a.reasoning.end
    tail = prompt_tail.rstrip()
    if end and tail.endswith(end):
        return False
    if start and tail.endswith(start):
        return True
    # FORCED_OPEN: the template opens reasoning in the prompt; this prompt did not say
    # either way, so output until the end marker may be reasoning all the same.
    return a.reasoning.mode is ReasoningMode.FORCED_OPEN and bool(end)


_PROBE_NAME = "ocm_probe_tool"
_PROBE_USER = "ocm probe question"


@functools.lru_cache(maxsize=64)
def call_head(source: str) -> str:
    """The text a template renders before a call's function name (``<tool_call>\n{"name": "``,
    ``<minimax:tool_call>\n<invoke name="``), read from the template itself: its own
    rendering of a call, from the first call marker to the name.  "" when it cannot tell
    (the name is not where a prefill can stop before it)."""
    from app.formats.template.analysis.analysis import analyze
    from app.formats.template.render import render_segments, segments_text

    a = analyze(source)
    t = a.tools
    tool = FunctionTool(_PROBE_NAME, "probe", {"type": "object", "properties": {"x": {"type": "string"}}})
    call_id = f"functions.{_PROBE_NAME}:0" if not t.ids_rendered else "abcDEF123"
    call = ToolCall(call_id, _PROBE_NAME, '{"x": "y"}')
    conv = Conversation((Message("user", (TextPart(_PROBE_USER),)),
                         Message("assistant", (), tool_calls=(call,))), (tool,))
    try:
        text = segments_text(render_segments(source, conv, add_generation_prompt=False, caps=a.caps))
    except Exception:  # a template that cannot render the probe: no head, no prefill
        return ""
    after = text.rfind(_PROBE_USER)
    opener = next((m.strip() for m in (t.section_start, t.per_call_start, t.name_prefix) if m.strip()), "")
    name_at = text.find(_PROBE_NAME, after)
    if opener:
        begin = text.find(opener, after)
        name_at = text.find(_PROBE_NAME, max(begin, after))
    elif t.format is ToolFormat.JSON_NATIVE:  # calls are bare JSON objects: from their "{"
        begin = text.rfind("{", after, name_at)
    else:
        begin = -1
    if begin < 0 or name_at < 0 or '"y"' in text[begin:name_at]:
        return ""
    return text[begin:name_at]


@dataclass(frozen=True, slots=True)
class ForcedCall:
    """How a forced call is opened: ``prefill`` ends the prompt; ``schema``, when set,
    constrains everything the model writes after it (the call's JSON object)."""

    prefill: str
    schema: dict[str, Any] | None = None


def _call_schema(a: TemplateAnalysis, tools: Sequence[FunctionTool]) -> dict[str, Any] | None:
    """The JSON schema of one call of any of ``tools`` in a JSON template's own shape
    (``{"name": ..., "arguments": {...}}``), or None where the shape is not that simple."""
    t = a.tools
    simple = (t.format is ToolFormat.JSON_NATIVE and t.name_field and t.args_field and not t.id_field
              and "." not in t.name_field + t.args_field and not t.fun_name_is_key and not t.python_dicts)
    if not simple or not tools:
        return None
    calls = [{"type": "object", "properties": {
        t.name_field: {"const": tool.name},
        t.args_field: tool.parameters or {"type": "object"}},
        "required": [t.name_field, t.args_field], "additionalProperties": False} for tool in tools]
    one: dict[str, Any] = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "array", "items": one, "minItems": 1, "maxItems": 1} if t.array_wrapped else one


def forced_call(source: str, a: TemplateAnalysis, params: GenerationParams,
                tools: Sequence[FunctionTool], prompt_tail: str) -> ForcedCall | None:
    """How to force a call for this request, or None when the call is not forced.

    JSON templates (Hermes, Qwen, Mistral Nemo, Llama 3.2, ...) get the call's opening up to
    its JSON and the JSON constrained to the allowed functions' names and argument schemas:
    reliable even on a tiny model.  Tag formats get the opening and, for one allowed
    function, its name."""
    choice = params.tool_choice
    if choice.mode != "required" or not tools or a.tools.format is ToolFormat.NONE:
        return None
    head = call_head(source)
    if not head:
        return None
    allowed = [x for x in tools if choice.allowed is None or x.name in choice.allowed]
    text = a.reasoning.end + "\n\n" if a.reasoning.end and in_reasoning(a, prompt_tail) else ""
    schema = _call_schema(a, allowed)
    json_at = head.rfind("[{" if a.tools.array_wrapped else "{")
    if schema is not None and json_at >= 0:
        return ForcedCall(text + head[:json_at], schema)
    return ForcedCall(text + head + (allowed[0].name if len(allowed) == 1 else ""))


class Prefilled:
    """A :class:`TextDecoder` that has read ``prefill`` (text the prompt wrote for the
    model) before the model's output; its events come out with the first call."""

    def __init__(self, decoder: TextDecoder, prefill: str) -> None:
        self._decoder = decoder
        self._pending: list[ev.Event] = decoder.decode(prefill) if prefill else []

    @property
    def stopped(self) -> ev.FinishReason | None:
        return self._decoder.stopped

    @stopped.setter
    def stopped(self, value: ev.FinishReason | None) -> None:
        self._decoder.stopped = value

    def _take(self) -> list[ev.Event]:
        pending, self._pending = self._pending, []
        return pending

    def decode(self, text: str) -> list[ev.Event]:
        return self._take() + self._decoder.decode(text)

    def flush(self, end: EndKind) -> tuple[list[ev.Event], ev.FinishReason | None]:
        events, reason = self._decoder.flush(end)
        return self._take() + events, reason
