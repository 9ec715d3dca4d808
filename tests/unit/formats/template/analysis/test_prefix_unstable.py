"""Templates that are not prefix-stable: the generation prompt differs from the render with the
answer *before* the assistant turn (a system turn only in the generation prompt; a tool preamble
put in front of the last user message). The templates here are synthetic, written for these
cases (issue 14 item 4 found them in real templates this project has not seen)."""

from __future__ import annotations

import json
from dataclasses import replace

from app.core import events as ev
from app.core.conversation import Conversation, Message, TextPart, ToolCall
from app.formats.template.analysis.analysis import _plausible, analyze
from app.formats.template.analysis.tools import ToolAnalysis, ToolFormat
from app.formats.template.parse import TemplateDecoder
from app.formats.template.render import render_segments, segments_text
from tests.unit.formats.template.analysis.roundtrip import CALLS, TOOLS, USER

SYSTEM_ONLY_WHEN_GENERATING = """\
{%- if add_generation_prompt %}<|im_start|>system
Reasoning: enabled<|im_end|>
{% endif %}
{%- if tools %}<|im_start|>system
Tools: {{ tools | tojson }}<|im_end|>
{% endif %}
{%- for message in messages %}<|im_start|>{{ message.role }}
{% if message.content %}{{ message.content }}{% endif %}{% if message.tool_calls %}\
{% for tc in message.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

PREAMBLE_ON_LAST_USER = """\
{%- for message in messages %}<|im_start|>{{ message.role }}
{% if message.role == 'user' and loop.last and tools %}You may call: \
{% for t in tools %}{{ t.function.name }} {% endfor %}
{% endif %}{% if message.content %}{{ message.content }}{% endif %}{% if message.tool_calls %}\
{% for tc in message.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def _roundtrip(source: str) -> tuple[str, list[tuple[str, object]], str | None]:
    a = analyze(source)
    calls = tuple(ToolCall(f"call{i}", fn, json.dumps(args)) for i, (fn, args) in enumerate(CALLS))
    msg = Message("assistant", (TextPart("Sure."),), tool_calls=calls)
    prompt = segments_text(render_segments(source, Conversation((USER,), TOOLS), caps=a.caps))
    full = segments_text(render_segments(source, Conversation((USER, msg), TOOLS), caps=a.caps,
                                         add_generation_prompt=False))
    start = full.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
    out = full[start:full.rindex(a.turn_end)]
    decoder = TemplateDecoder(a, TOOLS, prompt)
    events = decoder.decode(out)
    tail, reason = decoder.flush("eos")
    events += tail
    return ("".join(e.text for e in events if isinstance(e, ev.TextDelta)),
            [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ev.ToolCallDone)],
            reason)


def test_a_system_turn_only_in_the_generation_prompt() -> None:
    a = analyze(SYSTEM_ONLY_WHEN_GENERATING)
    assert (a.tools.format, a.tools.per_call_start, a.tools.per_call_end) == \
        (ToolFormat.JSON_NATIVE, "<tool_call>", "</tool_call>")
    assert a.content.start == "" and a.turn_end == "<|im_end|>"
    assert _roundtrip(SYSTEM_ONLY_WHEN_GENERATING) == ("Sure.", list(CALLS), "tool_calls")


def test_a_tool_preamble_on_the_last_user_turn() -> None:
    assert _roundtrip(PREAMBLE_ON_LAST_USER) == ("Sure.", list(CALLS), "tool_calls")


def test_markers_holding_prompt_text_are_not_used() -> None:
    """Whatever the diff gets wrong, a marker that holds a probe's needle (prompt or message
    text) or is far longer than markup is dropped: no tools (a clear 400) beats wrong calls."""
    a = analyze(SYSTEM_ONLY_WHEN_GENERATING)
    broken = replace(a, tools=replace(a.tools, section_end="<|im_end|>\nUSER_NEEDLE_Q<|im_end|>"))
    assert _plausible(broken).tools == ToolAnalysis()
    long = replace(a, tools=replace(a.tools, per_call_start="<" + "x" * 80 + ">"))
    assert _plausible(long).tools == ToolAnalysis()
    assert _plausible(a) == a


def test_a_reasoning_marker_is_never_the_tool_section_start() -> None:
    """A FORCED_OPEN / FORCED_CLOSED template's lone end-of-reasoning marker before the calls
    is not their section start (issue 14 item 8; no reference template shows it yet)."""
    from app.formats.template.analysis.result import ReasoningAnalysis, ReasoningMode

    a = analyze(SYSTEM_ONLY_WHEN_GENERATING)
    forced = replace(a, reasoning=ReasoningAnalysis(ReasoningMode.FORCED_OPEN, "<think>", "</think>"),
                     tools=replace(a.tools, section_start="</think>"))
    assert _plausible(forced).tools.section_start == ""
    assert _plausible(forced).tools.per_call_start == "<tool_call>"
