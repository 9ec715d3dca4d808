"""Round trips over all 24 templates: render an assistant message, parse it back.

The message has reasoning, content and one or two tool calls.  Templates do not all
render everything (many drop reasoning from history, some drop content next to calls,
some never render calls); ``DROPS`` lists, per template, what its render leaves out,
asserted against the render itself.  Everything the template does render must come
back exactly, for three seeded random chunkings and for the whole text at once,
except the templates in ``UNSUPPORTED``, whose (wrong) result is asserted so that the
test fails when behaviour changes.
"""

from __future__ import annotations

import pytest

from app.core.errors import InvalidRequest
from tests.unit.formats.template.analysis.roundtrip import (
    CALLS,
    CONTENT,
    REASONING,
    TEMPLATES,
    Parsed,
    message,
    parse,
    rendered_part,
)

R, C, T = "reasoning", "content", "calls"
DROPS: dict[str, frozenset[str]] = {
    "Apertus-8B-Instruct": frozenset({R}),
    "ByteDance-Seed-OSS": frozenset(),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": frozenset({C}),  # plan + action, or a response
    "GLM-4.6": frozenset(),
    "HuggingFaceTB-SmolLM3-3B": frozenset({R, T}),  # history keeps content only
    "Kimi-K2-Thinking": frozenset(),
    "MiniMax-M2": frozenset(),
    "Mistral-Small-3.2-24B-Instruct-2506": frozenset({R, C}),
    "NVIDIA-Nemotron-Nano-v2": frozenset({R}),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": frozenset({R, C}),
    "Qwen-QwQ-32B": frozenset({R}),  # content.split('</think>') history
    "Qwen3-Coder": frozenset({R}),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": frozenset({R, T}),  # calls only when content is None
    "deepseek-ai-DeepSeek-V3.1": frozenset({R}),
    "fireworks-ai-llama-3-firefunction-v2": frozenset({R}),
    "google-gemma-2-2b-it": frozenset({R, T}),
    "ibm-granite-granite-3.3-2B-Instruct": frozenset({R, T}),  # never renders assistant calls
    "llama-cpp-deepseek-r1": frozenset({R, T}),  # calls only when content is None
    "meetkai-functionary-medium-v3.1": frozenset({R}),
    "meta-llama-Llama-3.2-3B-Instruct": frozenset({R, C}),
    "microsoft-Phi-3.5-mini-instruct": frozenset({R, T}),
    "mistralai-Mistral-Nemo-Instruct-2407": frozenset({R, C}),
    "openai-gpt-oss-120b": frozenset({R}),  # renders content as analysis when calls follow
    "unsloth-Apriel-1.5": frozenset({R}),
}
SINGLE_CALL = {"meta-llama-Llama-3.2-3B-Instruct"}  # raise_exception on two calls
UNSUPPORTED: dict[str, str] = {
    "openai-gpt-oss-120b": "Harmony channels (served by prompt_format 'harmony', as llama.cpp special-cases "
                           "it): '<|channel|>analysis' is not a reasoning marker the analysis can see",
    "NVIDIA-Nemotron-Nano-v2": "history leaves '<think>' unclosed and renders the calls as a second "
                               "assistant turn; with the prompt's forced '<think>' everything parses "
                               "as reasoning",
}


def _expected(name: str, n: int) -> Parsed:
    drops = DROPS[name]
    calls = () if T in drops else CALLS[:n]
    return Parsed("" if R in drops else REASONING, "" if C in drops else CONTENT, calls,
                  "tool_calls" if calls else "stop", ())


def test_tables_cover_every_template() -> None:
    names = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
    assert names == sorted(DROPS) and len(names) == 24
    assert len(names) - len(UNSUPPORTED) >= 20


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("name", sorted(DROPS))
def test_roundtrip(name: str, n: int) -> None:
    msg = message(name, n)
    if n == 2 and name in SINGLE_CALL:
        with pytest.raises(InvalidRequest, match="single tool-calls"):
            rendered_part(name, msg)
        return
    prompt, text = rendered_part(name, msg)
    shown = {R: "I should call the tool." in text, C: CONTENT in text, T: "get_weather" in text}
    assert {k for k, v in shown.items() if not v} == DROPS[name]
    results = [parse(name, prompt, text, seed) for seed in (None, 1, 2, 3)]
    got = results[0]
    assert all(r == got for r in results), "chunking changed the result"
    if name in UNSUPPORTED:
        assert got != _expected(name, n)
        assert got.calls[:1] == CALLS[:1] if name == "openai-gpt-oss-120b" else got.calls == ()
    else:
        assert got == _expected(name, n)
