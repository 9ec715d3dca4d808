"""Tools and a response format on a reasoning chat template (QwQ's ``<think>``): a tool call
written after the reasoning is recognized as one at the start is, on Chat and Responses,
streamed or not; only an answer is regenerated under the schema (issue 35, item 9)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fake_template_llamacpp import FakeTemplateLlamaCpp
from tests.support.gateway import MODEL, config, gateway, sse_payloads
from tests.support.paths import FIXTURES

QWQ = str(FIXTURES / "templates" / "Qwen-QwQ-32B.jinja")
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMS}
CHAT_FORMAT = {"type": "json_schema", "json_schema": {"name": "obj", "schema": SCHEMA, "strict": True}}
RESPONSES_FORMAT = {"format": {"type": "json_schema", "name": "obj", "schema": SCHEMA, "strict": True}}
THINK = ["The user", " wants the weather.", " Call the tool."]
CALL = ["<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', "</tool_call>"]
ARGUMENTS = '{"city": "Paris"}'

# what the model writes after </think> before its call: nothing, whitespace (one event or
# several), a sentence
BRIDGES = {"tight": [], "newlines": ["\n\n"], "split": ["\n", " ", "\n"],
           "text": ["\n\n", "Let me check", " the weather.\n"]}
# how the client turns thinking on
THINKING: dict[str, dict[str, Any]] = {"kwargs": {"chat_template_kwargs": {"enable_thinking": True}},
            "effort": {"reasoning_effort": "high"}}


def _fake(bridge: list[str]) -> FakeTemplateLlamaCpp:
    return FakeTemplateLlamaCpp([*THINK, "</think>", *bridge, *CALL], constrained=['{"a": 1}'])


async def _chat(fake: FakeTemplateLlamaCpp, stream: bool, extra: dict[str, Any]) -> dict[str, Any]:
    """The chat answer as (content, reasoning, calls, finish) whichever way it came."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [CHAT_TOOL], "response_format": CHAT_FORMAT, "stream": stream, **extra}
    async with gateway(fake.transport(), config(prompt_format="template", template={"path": QWQ})) as client:
        r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    if not stream:
        choice = r.json()["choices"][0]
        msg = choice["message"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls") or []]
        return {"content": msg.get("content") or "", "reasoning": msg.get("reasoning_content") or "",
                "calls": calls, "finish": choice["finish_reason"]}
    events = [e for e in sse_payloads(r.text)[:-1] if e["choices"]]
    deltas = [e["choices"][0]["delta"] for e in events]
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for d in deltas:
        for c in d.get("tool_calls") or []:
            if c["function"].get("name"):
                names[c["index"]] = c["function"]["name"]
            args[c["index"]] = args.get(c["index"], "") + c["function"].get("arguments", "")
    return {"content": "".join(d.get("content") or "" for d in deltas),
            "reasoning": "".join(d.get("reasoning_content") or "" for d in deltas),
            "calls": [(names[i], args[i]) for i in sorted(names)],
            "finish": [e["choices"][0]["finish_reason"] for e in events
                       if e["choices"][0]["finish_reason"]][-1]}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("thinking", list(THINKING))
@pytest.mark.parametrize("bridge", list(BRIDGES))
async def test_chat_a_call_after_thinking_is_run_not_regenerated(bridge: str, thinking: str,
                                                                 stream: bool) -> None:
    fake = _fake(BRIDGES[bridge])
    got = await _chat(fake, stream, THINKING[thinking])
    assert got["finish"] == "tool_calls", got
    assert got["calls"] == [("get_weather", ARGUMENTS)]
    assert got["reasoning"] == "".join(THINK)
    assert got["content"] == ("Let me check the weather." if bridge == "text" else "")
    assert len(fake.completions) == 1 and "json_schema" not in fake.completions[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_an_answer_after_thinking_is_still_the_schema(stream: bool) -> None:
    """The neighbour that must not change: text after </think> (no call) is dropped and the
    answer generated again under the schema, after the reasoning."""
    fake = FakeTemplateLlamaCpp([*THINK, "</think>", "\n\n", "It is", " sunny."], constrained=['{"a": 1}'])
    got = await _chat(fake, stream, THINKING["kwargs"])
    assert (got["content"], got["calls"], got["finish"]) == ('{"a": 1}', [], "stop")
    first, second = fake.completions
    assert second["json_schema"] == SCHEMA and "json_schema" not in first
    assert second["prompt"] == [*first["prompt"], 3000, 3001, 3002, 3003]  # through </think>


async def _responses(fake: FakeTemplateLlamaCpp, stream: bool) -> dict[str, Any]:
    body = {"model": MODEL, "input": "Weather in Paris?", "tools": [RESPONSES_TOOL],
            "text": RESPONSES_FORMAT, "reasoning": {"effort": "high"}, "stream": stream}
    async with gateway(fake.transport(), config(prompt_format="template", template={"path": QWQ})) as client:
        r = await client.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    if stream:
        events = [e for e in sse_payloads(r.text) if isinstance(e, dict)]
        done = [e for e in events if e["type"] == "response.completed"]
        assert len(done) == 1, [e["type"] for e in events]
        resource: dict[str, Any] = done[0]["response"]
        streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert streamed == "".join(p["text"] for item in resource["output"] if item["type"] == "message"
                                   for p in item["content"] if p["type"] == "output_text")
        return resource
    return dict(r.json())


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("bridge", list(BRIDGES))
async def test_responses_a_call_after_thinking_is_run(bridge: str, stream: bool) -> None:
    fake = _fake(BRIDGES[bridge])
    resource = await _responses(fake, stream)
    calls = [(i["name"], i["arguments"]) for i in resource["output"] if i["type"] == "function_call"]
    assert calls == [("get_weather", ARGUMENTS)], resource["output"]
    texts = [p["text"] for i in resource["output"] if i["type"] == "message" for p in i["content"]]
    assert texts == (["Let me check the weather."] if bridge == "text" else [])
    assert len(fake.completions) == 1 and "json_schema" not in fake.completions[0]
