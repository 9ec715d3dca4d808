"""Golden files: our Harmony renderer against the gpt-oss Hugging Face chat template.

For each conversation we render (a) with :func:`app.formats.harmony.render.render_harmony`
and (b) with ``tests/fixtures/templates/openai-gpt-oss-120b.jinja`` through jinja2,
and store both in ``tests/fixtures/golden/harmony`` (``UPDATE_GOLDEN=1`` rewrites
them).  Our text must equal the template's after applying exactly the
normalizations the case lists; each normalization is an intentional, documented
difference and must actually change the template text of every case listing it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.core.conversation import (
    Conversation,
    FunctionTool,
    GenerationParams,
    Message,
    ReasoningEffort,
    TextPart,
    ToolCall,
)
from app.formats.harmony.render import HarmonyOptions, render_harmony
from app.formats.harmony.vocab import harmony_encoding
from tests.support.hf_template import render_template
from tests.support.paths import FIXTURES

GOLDEN = FIXTURES / "golden" / "harmony"
TEMPLATE = "openai-gpt-oss-120b.jinja"


# -- intentional differences ---------------------------------------------------------------
def constrain_json(text: str) -> str:
    """Tool-call content type: we write the cookbook's ``<|constrain|>json`` (what gpt-oss
    emits itself); the template writes plain `` json``."""
    return text.replace("<|channel|>commentary json<|message|>",
                        "<|channel|>commentary <|constrain|>json<|message|>")


def unquoted_tool_result(text: str) -> str:
    """Tool results: we pass the tool's output verbatim; the template JSON-quotes it (``|tojson``),
    turning an object into a string literal."""
    pattern = re.compile(r'(to=assistant<\|channel\|>commentary<\|message\|>)("(?:[^"\\]|\\.)*")(<\|end\|>)')
    return pattern.sub(lambda mt: mt.group(1) + json.loads(mt.group(2)) + mt.group(3), text)


def default_without_comma(text: str) -> str:
    """Enum parameters with a default: the template leaves a stray comma after the
    ``// default: X`` comment; openai-harmony does not."""
    return re.sub(r"(// default: [^\n,]*),\n", r"\1\n", text)


def instructions_without_trailing_blank(text: str) -> str:
    """Instructions without tools: the template ends the developer message with a blank line
    after the instructions; openai-harmony does not."""
    return re.sub(r"(<\|start\|>developer<\|message\|># Instructions\n\n(?:(?!<\|end\|>).)*?)\n\n<\|end\|>",
                  r"\1<|end|>", text, flags=re.S)


def nested_object_layout(text: str) -> str:
    """Object-typed parameters: the template's recursive macro emits stray whitespace and no
    trailing comma (``lang?: \n<16 spaces>string}``); openai-harmony writes one indented
    member per line and closes with ``},``."""
    return re.sub(r"\{\n(\w+\??): \n +(\w+)\},\n", r"{\n    \1: \2,\n    },\n", text)


def preamble_as_commentary(text: str) -> str:
    """``content`` next to a tool call: we render it as a ``commentary`` preamble (it was shown
    to the user as content); the template renders it as ``analysis``."""
    return text.replace("<|start|>assistant<|channel|>analysis<|message|>Let me check.<|end|>",
                        "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>")


Normalization = Callable[[str], str]

WEATHER_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"},
                   "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
    "required": ["city"]}
RICH_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"},
                   "limit": {"type": "integer", "description": "Max results", "default": 10},
                   "score": {"type": "number"},
                   "exact": {"type": "boolean"},
                   "tags": {"type": "array", "items": {"type": "string"}},
                   "filter": {"type": "object", "properties": {"lang": {"type": "string"}}}},
    "required": ["query", "tags"]}


@dataclass
class Case:
    name: str
    hf: list[dict[str, Any]]
    ours: list[Message]
    tools: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    effort: ReasoningEffort | None = None
    normalizations: tuple[Normalization, ...] = ()


def _u(text: str) -> Message:
    return Message("user", (TextPart(text),))


def _call(call_id: str, name: str, args: dict[str, Any]) -> ToolCall:
    return ToolCall(call_id, name, json.dumps(args))


CASES = [
    Case("user_only", [{"role": "user", "content": "Hello!"}], [_u("Hello!")]),
    Case("system_and_user", [{"role": "system", "content": "Answer in French."},
                             {"role": "user", "content": "Hi"}],
         [Message("system", (TextPart("Answer in French."),)), _u("Hi")],
         normalizations=(instructions_without_trailing_blank,)),
    Case("developer_and_user", [{"role": "developer", "content": "Be terse.\nNo lists."},
                                {"role": "user", "content": "Why?"}],
         [Message("developer", (TextPart("Be terse.\nNo lists."),)), _u("Why?")],
         normalizations=(instructions_without_trailing_blank,)),
    Case("effort_low", [{"role": "user", "content": "2+2?"}], [_u("2+2?")], effort="low"),
    Case("effort_high", [{"role": "user", "content": "2+2?"}], [_u("2+2?")], effort="high"),
    Case("tools_enum_default", [{"role": "user", "content": "Weather?"}], [_u("Weather?")],
         tools=[("get_weather", "Get the weather", WEATHER_PARAMS)],
         normalizations=(default_without_comma,)),
    Case("tools_rich_schema", [{"role": "system", "content": "Use tools."},
                               {"role": "user", "content": "Find cats"}],
         [Message("system", (TextPart("Use tools."),)), _u("Find cats")],
         tools=[("search", "Search the index", RICH_PARAMS), ("ping", "Ping", {})],
         normalizations=(default_without_comma, nested_object_layout)),
    Case("multi_turn_drops_old_reasoning",
         [{"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!", "thinking": "Greet back."},
          {"role": "user", "content": "Bye"}],
         [_u("Hi"), Message("assistant", (TextPart("Hello!"),), reasoning="Greet back."), _u("Bye")]),
    Case("pending_tool_call_keeps_reasoning",
         [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "thinking": "Need the tool.", "tool_calls": [
              {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "content": '{"temp": 20}'}],
         [_u("Weather in Paris?"),
          Message("assistant", tool_calls=(_call("c1", "get_weather", {"city": "Paris"}),),
                    reasoning="Need the tool."),
          Message("tool", (TextPart('{"temp": 20}'),), tool_call_id="c1")],
         tools=[("get_weather", "Get the weather", WEATHER_PARAMS)],
         normalizations=(default_without_comma, constrain_json, unquoted_tool_result)),
    Case("answered_tool_call_drops_reasoning",
         [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "thinking": "Need the tool.", "tool_calls": [
              {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "content": '{"temp": 20}'},
          {"role": "assistant", "content": "It is 20 degrees."},
          {"role": "user", "content": "Thanks"}],
         [_u("Weather in Paris?"),
          Message("assistant", tool_calls=(_call("c1", "get_weather", {"city": "Paris"}),),
                    reasoning="Need the tool."),
          Message("tool", (TextPart('{"temp": 20}'),), tool_call_id="c1"),
          Message("assistant", (TextPart("It is 20 degrees."),)), _u("Thanks")],
         tools=[("get_weather", "Get the weather", WEATHER_PARAMS)],
         normalizations=(default_without_comma, constrain_json, unquoted_tool_result)),
    Case("content_next_to_tool_call",
         [{"role": "user", "content": "Weather?"},
          {"role": "assistant", "content": "Let me check.", "tool_calls": [
              {"type": "function", "function": {"name": "ping", "arguments": {}}}]},
          {"role": "tool", "content": "pong"}],
         [_u("Weather?"),
          Message("assistant", (TextPart("Let me check."),),
                    tool_calls=(_call("c9", "ping", {}),)),
          Message("tool", (TextPart("pong"),), tool_call_id="c9")],
         tools=[("ping", "Ping", {})],
         normalizations=(constrain_json, unquoted_tool_result, preamble_as_commentary)),
]


def _ours(case: Case) -> tuple[str, list[int]]:
    conv = Conversation(tuple(case.ours),
                          tuple(FunctionTool(n, d, p) for n, d, p in case.tools))
    prompt = render_harmony(conv, GenerationParams(reasoning_effort=case.effort),
                            HarmonyOptions(current_date="2026-11-22"))
    ids = list(prompt.token_ids or ())
    return harmony_encoding().decode(ids), ids


def _template(case: Case) -> str:
    kwargs: dict[str, Any] = {}
    if case.tools:
        kwargs["tools"] = [{"type": "function", "function": {"name": n, "description": d, "parameters": p}}
                           for n, d, p in case.tools]
    if case.effort:
        kwargs["reasoning_effort"] = case.effort
    return render_template(TEMPLATE, case.hf, **kwargs)


def _golden(path: Path, text: str) -> str:
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_template_up_to_documented_differences(case: Case) -> None:
    ours, ids = _ours(case)
    template = _template(case)
    assert ours == _golden(GOLDEN / f"{case.name}.ours.txt", ours)
    assert template == _golden(GOLDEN / f"{case.name}.template.txt", template)
    normalized = template
    for normalize in case.normalizations:
        changed = normalize(normalized)
        assert changed != normalized, f"{normalize.__name__} is listed but not needed"
        normalized = changed
    assert normalized == ours
    # The ids are exactly what tokenizing the text would give: no odd token boundaries.
    assert ids == harmony_encoding().encode(ours, allowed_special="all")


def test_every_normalization_is_used() -> None:
    used = {n.__name__ for c in CASES for n in c.normalizations}
    assert used == {"constrain_json", "unquoted_tool_result", "default_without_comma",
                    "preamble_as_commentary", "instructions_without_trailing_blank",
                    "nested_object_layout"}
