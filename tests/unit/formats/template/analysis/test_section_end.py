"""Tool sections a template writes only around several calls (issue 14, item 2).

Each variant is a real template (``tests/fixtures/templates``) with one edit: the section
that wraps the calls is opened and / or closed only when there is more than one call, so
the one-call render the analysis starts from does not show it.  The section's markers must
come from the two-call render, and every call round-trips, whole and in random chunkings.
"""

from __future__ import annotations

import json

import pytest

from app.core.conversation import Message, ToolCall
from app.formats.template.analysis.analysis import analyze
from tests.unit.formats.template.analysis.roundtrip import (
    CALLS,
    CONTENT,
    TEMPLATES,
    VARIANTS,
    Parsed,
    ids_for,
    message,
    parse,
    rendered_part,
)

CLOSE_AFTER_SEVERAL = "{%- if loop.last and not loop.first %}{{- '\\n</tool_calls>' }}{%- endif %}"
OPEN_FOR_SEVERAL = "{%- if loop.first and not loop.last %}{{- '\\n<tool_calls>' }}{%- endif %}"
QWEN_CALL_OPEN = "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
QWEN_CALL_CLOSE = "{{- '</function>\\n</tool_call>' }}"
HERMES_CALL_CLOSE = "{{- '\n</tool_call>' }}"


def _variant(base: str, *edits: tuple[str, str]) -> str:
    source = (TEMPLATES / f"{base}.jinja").read_text()
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


VARIANTS.update({
    "qwen3-coder-closes-after-several": _variant(
        "Qwen3-Coder", (QWEN_CALL_CLOSE, QWEN_CALL_CLOSE + CLOSE_AFTER_SEVERAL)),
    "qwen3-coder-section-for-several": _variant(
        "Qwen3-Coder", (QWEN_CALL_CLOSE, QWEN_CALL_CLOSE + CLOSE_AFTER_SEVERAL),
        (QWEN_CALL_OPEN, OPEN_FOR_SEVERAL + QWEN_CALL_OPEN)),
    "hermes-closes-after-several": _variant(
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        (HERMES_CALL_CLOSE, HERMES_CALL_CLOSE + CLOSE_AFTER_SEVERAL)),
})
NAMES = sorted(n for n in VARIANTS if "-several" in n)


@pytest.mark.parametrize("name", NAMES)
def test_section_markers_come_from_the_two_call_render(name: str) -> None:
    tools = analyze(VARIANTS[name]).tools
    assert tools.section_end == "</tool_calls>"
    assert tools.section_start == ("<tool_calls>" if "section-for" in name else "")


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_calls_round_trip(name: str, n: int) -> None:
    prompt, text = rendered_part(name, message(name, n))
    assert ("</tool_calls>" in text) == (n == 2)  # the edit shows only with several calls
    results = [parse(name, prompt, text, seed) for seed in (None, 1, 2, 3)]
    assert all(r == results[0] for r in results)
    got = results[0]
    assert got.calls == CALLS[:n] and got.finish == "tool_calls" and not got.errors
    assert got.content == (CONTENT if "Qwen" in name or "qwen" in name else "")


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("name", ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "llama-cpp-deepseek-r1"])
def test_deepseek_r1_closes_the_section_only_after_the_second_call(name: str, n: int) -> None:
    """The real templates, with the calls they render (only without content): the
    Distill template's ``<｜tool▁calls▁end｜>`` sits in the branch for the second and later
    calls, so a one-call render never shows it (and it used to come back as text)."""
    ids = ids_for(name)
    calls = tuple(ToolCall(ids[i], fn, json.dumps(args)) for i, (fn, args) in enumerate(CALLS[:n]))
    prompt, text = rendered_part(name, Message("assistant", (), tool_calls=calls))
    # (llama.cpp's edited copy writes it after every last call)
    assert text.endswith("<｜tool▁calls▁end｜>") == (n == 2 or name.startswith("llama-cpp"))
    results = [parse(name, prompt, text, seed) for seed in (None, 1, 2, 3)]
    assert all(r == results[0] for r in results)
    assert results[0] == Parsed("", "", CALLS[:n], "tool_calls", ())
