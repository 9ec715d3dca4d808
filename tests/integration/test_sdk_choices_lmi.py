"""``n > 1`` through the OpenAI SDK, and SageMaker LMI's ``inputs`` schema, against the real
gateway in front of a REAL llama.cpp server (scripted models: the answers are known)."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest
from openai import OpenAI

pytestmark = pytest.mark.integration

ASK = [{"role": "user", "content": "Say hello."}]
HELLO = "Hello from a scripted tiny model!"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture
def client(gateway_url: str) -> OpenAI:
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="not-needed", max_retries=0, timeout=60)


def test_n_non_streaming(client: OpenAI) -> None:
    one = client.chat.completions.create(model="scripted-final", messages=ASK)  # type: ignore[arg-type]
    r = client.chat.completions.create(model="scripted-final", messages=ASK, n=3, seed=1)  # type: ignore[arg-type]
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.content == HELLO and c.finish_reason == "stop" for c in r.choices)
    assert r.usage is not None and one.usage is not None
    assert r.usage.completion_tokens == 3 * one.usage.completion_tokens


def test_n_streaming(client: OpenAI) -> None:
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    usages = []
    stream = client.chat.completions.create(model="scripted-final", messages=ASK, n=3,  # type: ignore[call-overload]
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes.setdefault(choice.index, []).append(choice.finish_reason)
    assert texts == {0: HELLO, 1: HELLO, 2: HELLO}
    assert finishes == {0: ["stop"], 1: ["stop"], 2: ["stop"]}
    assert len(usages) == 1 and usages[0].completion_tokens == 33


def test_n_tool_calls_per_choice(client: OpenAI) -> None:
    r = client.chat.completions.create(model="scripted-tool", messages=ASK, tools=[WEATHER], n=2)  # type: ignore[arg-type,list-item]
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather"  # type: ignore[union-attr]
        assert isinstance(json.loads(call.function.arguments), dict)  # type: ignore[union-attr]
    ids = [c.message.tool_calls[0].id for c in r.choices]  # type: ignore[index]
    assert len(set(ids)) == 2


def test_n_above_the_cap(client: OpenAI, gateway_url: str) -> None:
    r = httpx.post(f"{gateway_url}/v1/chat/completions", timeout=30, json={
        "model": "scripted-final", "messages": ASK, "n": 9})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


def test_lmi_inputs(gateway_url: str) -> None:
    r = httpx.post(f"{gateway_url}/invocations", timeout=60, json={
        "model": "scripted-final", "inputs": "Say hello.",
        "parameters": {"max_new_tokens": 64, "details": True, "do_sample": False}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["generated_text"] == HELLO
    assert body["details"]["finish_reason"] == "eos_token" and body["details"]["generated_tokens"] == 11
    r = httpx.post(f"{gateway_url}/invocations", timeout=60, json={
        "model": "scripted-final", "inputs": "Say hello.", "stream": True})
    assert r.headers["content-type"].startswith("application/jsonlines")
    lines = [orjson.loads(line) for line in r.text.splitlines()]
    assert "".join(line["token"]["text"] for line in lines) == HELLO
    assert lines[-1]["generated_text"] == HELLO
    r = httpx.post(f"{gateway_url}/invocations", timeout=60, json={
        "model": "scripted-final", "inputs": "hi", "parameters": {"top_k": 50}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "parameters.top_k"
