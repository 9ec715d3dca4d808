"""Chat-mode backends (Ollama ``/api/chat``, OpenAI-compatible) through the real app.

The same assistant turn (a text answer; reasoning then an answer; reasoning then a
tool call) is streamed by a fake of each server in its own wire dialect
(``tests/support/chat_fakes.py``).  Both must give exactly the Chat Completions and
Open Responses output the turn implies, streaming and not, and the same output as
each other.  Then: a client disconnect closes a real loopback upstream within 100 ms.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.chat_fakes import FakeChat, Script
from tests.support.gateway import MODEL, config, gateway, sse_payloads
from tests.support.openresponses import check_stream, validate_response

BACKENDS = ["ollama", "openai"]
WEATHER_CHAT = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
WEATHER_RESP = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}

# name → (script, expected chat message, expected finish_reason)
TURNS: dict[str, tuple[Script, dict[str, Any], str]] = {
    "text": (Script([("text", "Hello"), ("text", " there!")]),
             {"role": "assistant", "content": "Hello there!"}, "stop"),
    "reasoning": (Script([("reasoning", "The user greets me;"), ("reasoning", " reply politely."),
                          ("text", "Hi there,"), ("text", " friend!")]),
                  {"role": "assistant", "content": "Hi there, friend!",
                   "reasoning_content": "The user greets me; reply politely."}, "stop"),
    "tool_call": (Script([("reasoning", "Need the weather."),
                          ("call", "call_w1", "get_weather", '{"city":"Paris"}')]),
                  {"role": "assistant", "content": None, "reasoning_content": "Need the weather.",
                   "tool_calls": [{"id": "call_w1", "type": "function", "function": {
                       "name": "get_weather", "arguments": '{"city":"Paris"}'}}]}, "tool_calls"),
}
USAGE = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}


def _cfg(backend: str) -> Any:
    return config(backend=backend, prompt_format="chat", upstream_model="qwen3")


def _strip(body: Any) -> Any:
    """Drop what differs between two runs (generated ids, timestamps)."""
    if isinstance(body, dict):
        return {k: _strip(v) for k, v in body.items()
                if k not in ("id", "created", "created_at", "completed_at", "response_id")}
    if isinstance(body, list):
        return [_strip(v) for v in body]
    return body


def _sse(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    events: list[dict[str, Any]] = []
    names: list[str] = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        data = "\n".join(x[6:] for x in lines if x.startswith("data: "))
        if data and data != "[DONE]":
            names += [x[7:] for x in lines if x.startswith("event: ")]
            events.append(json.loads(data))
    return events, names


async def _run(backend: str, turn: str) -> dict[str, Any]:
    """Every view of one turn: chat (body, stream), responses (body, stream, stored)."""
    script = TURNS[turn][0]
    tools = turn == "tool_call"
    chat: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Hi!"}]}
    resp: dict[str, Any] = {"model": MODEL, "input": "Hi!"}
    if tools:
        chat["tools"], resp["tools"] = [WEATHER_CHAT], [WEATHER_RESP]
    out: dict[str, Any] = {}
    fake = FakeChat(script, backend)
    async with gateway(fake.transport(), _cfg(backend)) as c:
        out["chat"] = (await c.post("/v1/chat/completions", json=chat)).json()
        r = await c.post("/v1/chat/completions", json={
            **chat, "stream": True, "stream_options": {"include_usage": True}})
        out["chat_stream"] = sse_payloads(r.text)
        out["responses"] = (await c.post("/v1/responses", json=resp)).json()
        r = await c.post("/v1/responses", json={**resp, "stream": True})
        events, names = _sse(r.text)
        out["responses_stream"] = check_stream(events, names)
        out["stored"] = (await c.get(f"/v1/responses/{out['responses_stream']['id']}")).json()
    out["upstream"] = fake.requests
    return out


@pytest.mark.parametrize("turn", list(TURNS))
@pytest.mark.parametrize("backend", BACKENDS)
async def test_turn_through_every_api(backend: str, turn: str) -> None:
    _, message, finish = TURNS[turn]
    out = await _run(backend, turn)

    body = out["chat"]
    assert body["choices"][0]["message"] == message
    assert body["choices"][0]["finish_reason"] == finish
    assert {k: body["usage"][k] for k in USAGE} == USAGE

    chunks = out["chat_stream"]
    assert chunks[-1] == "[DONE]" and chunks[-2]["choices"] == []
    assert {k: chunks[-2]["usage"][k] for k in USAGE} == USAGE
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2] if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == (message["content"] or "")
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message.get("reasoning_content", "")
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    if "tool_calls" in message:
        assert calls[0]["id"] == "call_w1" and calls[0]["function"]["name"] == "get_weather"
        assert "".join(tc["function"]["arguments"] for tc in calls) == '{"city":"Paris"}'
    else:
        assert calls == []
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-2]
            if c["choices"] and c["choices"][0]["finish_reason"]] == [finish]

    resp = out["responses"]
    validate_response(resp)
    assert resp["status"] == "completed"
    assert resp["usage"]["input_tokens"] == 12 and resp["usage"]["output_tokens"] == 9
    kinds = [item["type"] for item in resp["output"]]
    expect_kinds = (["reasoning"] if "reasoning_content" in message else []) + (
        ["function_call"] if "tool_calls" in message else ["message"])
    assert kinds == expect_kinds
    for item in resp["output"]:
        if item["type"] == "reasoning":
            assert item["content"] == [{"type": "reasoning_text", "text": message["reasoning_content"]}]
        elif item["type"] == "message":
            assert [p["text"] for p in item["content"]] == [message["content"]]
        else:
            assert (item["call_id"], item["name"], item["arguments"]) == (
                "call_w1", "get_weather", '{"city":"Paris"}')
    assert _strip(out["responses_stream"]) == _strip(resp)  # streaming == non-streaming
    assert out["stored"] == out["responses_stream"]

    sent = out["upstream"][0]
    assert sent["model"] == "qwen3" and sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": "Hi!"}]
    assert ("tools" in sent) == (turn == "tool_call")


def _fold(chunks: list[Any]) -> dict[str, Any]:
    """A chat stream's content (chunk boundaries differ by server: Ollama sends whole
    calls, OpenAI-compatible servers send argument fragments)."""
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2] if c["choices"]]
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        for tc in d.get("tool_calls", []):
            call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] += tc.get("id", "")
            call["name"] += tc["function"].get("name", "")
            call["arguments"] += tc["function"]["arguments"]
    return {"content": "".join(d.get("content") or "" for d in deltas),
            "reasoning": "".join(d.get("reasoning_content") or "" for d in deltas),
            "calls": calls,
            "finish": [c["choices"][0]["finish_reason"] for c in chunks[:-2] if c["choices"]][-1],
            "usage": chunks[-2]["usage"]}


@pytest.mark.parametrize("turn", list(TURNS))
async def test_both_backends_give_identical_output(turn: str) -> None:
    ollama, openai = await _run("ollama", turn), await _run("openai", turn)
    for view in ("chat", "responses", "responses_stream", "stored"):
        assert _strip(ollama[view]) == _strip(openai[view]), view
    assert _fold(ollama["chat_stream"]) == _fold(openai["chat_stream"])


async def test_url_image_is_refused_at_ingest_naming_the_part() -> None:
    fake = FakeChat(TURNS["text"][0], "ollama")
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    async with gateway(fake.transport(), _cfg("ollama")) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[1]"
    assert r.json()["error"]["code"] == "invalid_image_url"  # the gateway fetches no address
    assert fake.requests == []  # refused before anything went upstream


async def test_n_runs_one_generation_per_choice() -> None:
    for backend in BACKENDS:
        fake = FakeChat(TURNS["text"][0], backend)
        async with gateway(fake.transport(), _cfg(backend)) as c:
            r = await c.post("/v1/chat/completions", json={
                "model": MODEL, "n": 2, "messages": [{"role": "user", "content": "Hi!"}]})
            assert r.status_code == 200, r.text
            choices = r.json()["choices"]
            assert [ch["index"] for ch in choices] == [0, 1]
            assert choices[0]["message"] == choices[1]["message"]
            r = await c.post("/v1/chat/completions", json={
                "model": MODEL, "n": 9, "messages": [{"role": "user", "content": "Hi!"}]})
            assert r.status_code == 400 and r.json()["error"]["param"] == "n"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("parallel", [True, False])
async def test_parallel_tool_calls_false_returns_one_call(backend: str, parallel: bool) -> None:
    # Ollama ignores the flag and sends two calls; the gateway passes on only the first.
    script = Script([("call", "call_a", "get_weather", '{"city":"Paris"}'),
                     ("call", "call_b", "get_weather", '{"city":"Oslo"}')])
    fake = FakeChat(script, backend)
    async with gateway(fake.transport(), _cfg(backend)) as c:
        r = await c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER_CHAT], "parallel_tool_calls": parallel})
        s = await c.post("/v1/responses", json={"model": MODEL, "input": "Weather?", "stream": True,
                                                "tools": [WEATHER_RESP], "parallel_tool_calls": parallel})
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert [call["id"] for call in calls] == (["call_a", "call_b"] if parallel else ["call_a"])
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    events, _ = _sse(s.text)
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert [item["call_id"] for item in output] == (["call_a", "call_b"] if parallel else ["call_a"])


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_end_user_reaches_an_openai_compatible_upstream(backend: str) -> None:
    fake = FakeChat(Script([("text", "Hi")]), backend)
    async with gateway(fake.transport(), _cfg(backend)) as c:
        await c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "user": "user-42"})
        await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "safety_identifier": "sid-7"})
    sent = [body.get("user") for body in fake.requests]
    # Ollama's /api/chat has no such field; an OpenAI-compatible server gets it (abuse tracking).
    assert sent == ([None, None] if backend == "ollama" else ["user-42", "sid-7"])
