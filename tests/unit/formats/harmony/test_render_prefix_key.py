"""The cached system / developer prefix (``render._PREFIXES``) is keyed by everything it is
made of: a request never gets the prefix another request made, however close the two are
(tools that differ in one name, description, parameter schema, namespace or built-in; other
instructions, effort, date, identity or response format).

A request and its neighbours (each differing from it in one part) are rendered one after
another with the cache shared (warm), and each must be what it is with the cache emptied before it (cold;
``test_render_cache.py`` shows a cold render is openai-harmony's whole-conversation render).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.conversation import (
    Conversation,
    FunctionTool,
    GenerationParams,
    Message,
    ResponseFormat,
    TextPart,
    ToolChoice,
)
from app.formats.harmony import render as r

PARAMETERS: list[dict[str, Any] | None] = [
    None, {"type": "object"}, {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "integer"}}},
    {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]
tools = st.builds(
    FunctionTool,
    name=st.sampled_from(["f", "g", "ns__f", "ns__g"]),
    description=st.sampled_from([None, "", "d", "D", "d "]),
    parameters=st.sampled_from(PARAMETERS),
    namespace=st.sampled_from([None, None, "ns"]),
    builtin=st.sampled_from([None, None, None, "file_search"]),
)


def _unique(items: list[FunctionTool]) -> tuple[FunctionTool, ...]:
    seen: dict[str, FunctionTool] = {}
    for tool in items:
        seen.setdefault(tool.name, tool)
    return tuple(seen.values())


INSTRUCTIONS = ["", "Be brief.", "Be brief. ", "be brief."]
FORMATS = [None, ResponseFormat("a", {"type": "object"}), ResponseFormat("b", {"type": "object"}),
           ResponseFormat("a", {"type": "array"}), ResponseFormat("a", {"type": "object"}, "about a")]
Request = tuple[Conversation, GenerationParams, r.HarmonyOptions]


def _request(instructions: str, offered: tuple[FunctionTool, ...], rf: ResponseFormat | None,
             params: GenerationParams, opts: r.HarmonyOptions) -> Request:
    system = [Message("system", (TextPart(instructions),))] if instructions else []
    return Conversation((*system, Message("user", (TextPart("hi"),))), offered, rf), params, opts


@st.composite
def neighbours(draw: st.DrawFn) -> list[Request]:
    """A request, then requests that each differ from it in one part."""
    instructions = draw(st.sampled_from(INSTRUCTIONS))
    offered = _unique(draw(st.lists(tools, min_size=1, max_size=3)))
    rf = draw(st.sampled_from(FORMATS))
    params = GenerationParams(reasoning_effort=draw(st.sampled_from([None, "low", "high"])))
    opts = r.HarmonyOptions(current_date="2026-11-22")
    batch = [_request(instructions, offered, rf, params, opts)]
    for _ in range(draw(st.integers(1, 6))):
        part = draw(st.sampled_from(["tool", "tool", "field", "field", "instructions", "format", "effort",
                                     "choice", "identity", "cutoff", "date"]))
        i, o, f, p, opt = instructions, offered, rf, params, opts
        if part == "tool":  # one of the tools replaced by another of the same name or a new one
            k = draw(st.integers(0, len(offered) - 1))
            o = _unique([*offered[:k], draw(tools), *offered[k + 1:]])
        elif part == "field":  # one field of one tool changed
            k = draw(st.integers(0, len(offered) - 1))
            name = draw(st.sampled_from(["name", "description", "parameters", "namespace", "builtin"]))
            value = draw({"name": st.sampled_from(["f", "h", "ns__h"]),
                          "description": st.sampled_from([None, "", "d", "D", "d "]),
                          "parameters": st.sampled_from(PARAMETERS),
                          "namespace": st.sampled_from([None, "ns", "other"]),
                          "builtin": st.sampled_from([None, "file_search"])}[name])
            o = _unique([*offered[:k], replace(offered[k], **{name: value}), *offered[k + 1:]])
        elif part == "instructions":
            i = draw(st.sampled_from(INSTRUCTIONS))
        elif part == "format":
            f = draw(st.sampled_from(FORMATS))
        elif part == "effort":
            p = GenerationParams(reasoning_effort=draw(st.sampled_from([None, "low", "high"])))
        elif part == "choice":
            p = GenerationParams(reasoning_effort=params.reasoning_effort, tool_choice=ToolChoice("none"))
        elif part == "identity":
            opt = r.HarmonyOptions(model_identity="You are B.", current_date=opts.current_date)
        elif part == "cutoff":
            opt = r.HarmonyOptions(knowledge_cutoff="2024-07", current_date=opts.current_date)
        else:
            opt = r.HarmonyOptions(current_date="2026-11-23")
        batch.append(_request(i, o, f, p, opt))
    return batch


@settings(max_examples=150, deadline=None)
@given(neighbours())
def test_a_warm_cache_serves_each_request_its_own_prefix(batch: list[Request]) -> None:
    cold = []
    for conv, params, opts in batch:
        r._PREFIXES.clear()
        cold.append(r.render_harmony(conv, params, opts).token_ids)
    r._PREFIXES.clear()
    for _ in range(2):  # the second pass: every prefix is in the cache
        warm = [r.render_harmony(conv, params, opts).token_ids for conv, params, opts in batch]
        assert warm == cold


def test_tools_that_differ_in_one_part_get_their_own_prefix() -> None:
    user = (Message("user", (TextPart("hi"),)),)
    base = FunctionTool("f", "d", {"type": "object", "properties": {"a": {"type": "string"}}})
    variants = [base, FunctionTool("g", "d", base.parameters), FunctionTool("f", "e", base.parameters),
                FunctionTool("f", "d", {"type": "object", "properties": {"a": {"type": "integer"}}}),
                FunctionTool("ns__f", "d", base.parameters, namespace="ns"),
                FunctionTool("ns__f", "d", base.parameters)]
    r._PREFIXES.clear()
    prompts = [r.render_harmony(Conversation(user, (tool,)), GenerationParams()).token_ids
               for tool in variants]
    assert len(set(prompts)) == len(variants)
    assert len(r._PREFIXES) == len(variants)
