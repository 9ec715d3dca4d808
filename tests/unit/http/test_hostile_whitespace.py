"""Text the tokenizer cannot take in one call, on every path that reaches it (issue 35):
whitespace of any kind, a 14 MB ordinary message, a 100,000-message count.

A long run of spaces or no-break spaces is one o200k piece (quadratic to encode, a panic near
1 MB): each path answers 200 or a clear 4xx in the API's error envelope, never a 500, and
nothing that cannot be rendered is stored.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from app.engine import count, generation
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config, gateway

ANSWER = "<|channel|>final<|message|>Hi.<|return|>"
WIDE = config(context_window=400_000)  # wide enough that 1.1 MB of spaces must be encoded
TEXTS = {"spaces": " " * 1_100_000, "no-break spaces": "\u00a0" * 600_000,
         "slash-newline": "/\n" * 150_000}


def _error(r: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize("name", list(TEXTS))
async def test_every_path_answers_without_a_500(name: str) -> None:
    text = TEXTS[name]
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), WIDE) as c:
        chat = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 8}
        r = await c.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200, r.text
        r = await c.post("/v1/chat/completions", json={**chat, "stream": True})
        assert r.status_code == 200 and "data: [DONE]" in r.text
        r = await c.post("/v1/responses", json={"model": MODEL, "input": text, "max_output_tokens": 8})
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        r = await c.post("/v1/responses/input_tokens", json={"model": MODEL, "input": text})
        assert r.status_code == 200 and r.json()["input_tokens"] == len(up.requests[2]["prompt"])
        r = await c.post("/tokenize", json={"model": MODEL, "prompt": text})
        assert r.status_code == 200 and r.json()["count"] > 0
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "instructions": text})
        _error(r, 400, "instructions")
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [
            {"type": "function", "name": "f", "description": text}]})
        _error(r, 400, "tools")  # more tool text than openai-harmony is given in one call
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [
            {"type": "function", "name": "f", "description": text[:50_000]}]})
        _error(r, 400, "tools (f)")  # within that, a run it cannot split
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "system", "content": text}, {"role": "user", "content": "hi"}]})
        _error(r, 400, "messages[0]")
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
                "x": {"type": "string", "description": text[:5000]}}}}]})
        _error(r, 400, "tools (f)")


async def test_a_tool_output_of_whitespace_is_rendered() -> None:
    """A function's (or an MCP tool's) output goes through the same encoder as a message."""
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), WIDE) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 8, "input": [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "\u00a0" * 32_768}],
            "tools": [{"type": "function", "name": "f"}]})
        assert r.status_code == 200, r.text


async def test_a_conversation_never_stores_what_cannot_be_rendered() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), WIDE) as c:
        # instructions openai-harmony would have to encode itself: refused when stored
        r = await c.post("/v1/conversations", json={"items": [
            {"role": "developer", "content": " " * 1_100_000}]})
        _error(r, 400, "items[0].content")
        conv = (await c.post("/v1/conversations", json={"items": []})).json()["id"]
        r = await c.post(f"/v1/conversations/{conv}/items", json={"items": [
            {"role": "user", "content": "ok"}, {"role": "system", "content": [
                {"type": "input_text", "text": "\u00a0" * 3000}]}]})
        _error(r, 400, "items[1].content")
        r = await c.post("/v1/responses", json={"model": MODEL, "conversation": conv,
                                                 "input": [{"role": "developer", "content": "\n" * 5000}]})
        _error(r, 400, "input[0].content")
        # a user's whitespace is stored, and every later response on the conversation renders it
        r = await c.post(f"/v1/conversations/{conv}/items", json={"items": [
            {"role": "user", "content": " " * 1_100_000}]})
        assert r.status_code == 200, r.text
        for truncation in ("disabled", "auto"):
            r = await c.post("/v1/responses", json={"model": MODEL, "conversation": conv, "input": "and?",
                                                     "truncation": truncation, "max_output_tokens": 8})
            assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    async with gateway(FakeLlamaCpp(ANSWER).transport(), config(context_window=8192)) as c:
        conv = (await c.post("/v1/conversations", json={"items": [
            {"role": "user", "content": " " * 1_100_000}]})).json()["id"]
        r = await c.post("/v1/responses", json={"model": MODEL, "conversation": conv, "input": "and?"})
        _error(r, 400)  # a window too small: context_length_exceeded, not a 500
        r = await c.post("/v1/responses", json={"model": MODEL, "conversation": conv, "input": "and?",
                                                 "truncation": "auto", "max_output_tokens": 8})
        assert r.status_code == 200, r.text  # the oldest turn dropped


def _never_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    def render(*args: Any) -> Any:
        raise AssertionError("rendered a prompt that cannot fit")

    monkeypatch.setattr(generation, "render", render)


async def test_what_cannot_fit_is_refused_before_it_is_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 14 MB ordinary message cannot be fewer than 14 MB / 128 tokens: refused by that bound."""
    big = "w " * 7_340_032
    _never_rendered(monkeypatch)
    async with gateway(FakeLlamaCpp(ANSWER).transport(), config(context_window=65_536)) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": big}]})
        assert _error(r, 400, "messages")["code"] == "context_length_exceeded"
        r = await c.post("/v1/responses", json={"model": MODEL, "input": [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": big}]})
        assert _error(r, 400, "messages")["code"] == "context_length_exceeded"
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 40_000, "messages": [
            {"role": "user", "content": "w " * 2_000_000}]})
        assert _error(r, 400, "max_tokens")["code"] == "context_length_exceeded"


async def test_a_count_renders_a_long_input_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[bool] = []
    render = generation.render

    def recording(*args: Any) -> Any:
        threads.append(threading.current_thread() is threading.main_thread())
        return render(*args)

    monkeypatch.setattr(generation, "render", recording)
    monkeypatch.setattr(count, "render", recording)  # a long count renders and counts in one thread
    async with gateway(FakeLlamaCpp(ANSWER).transport(), config(context_window=131_072)) as c:
        r = await c.post("/v1/responses/input_tokens", json={"model": MODEL, "input": [
            {"role": "user", "content": f"m{i}"} for i in range(2000)]})
        assert r.status_code == 200 and r.json()["input_tokens"] > 2000
        r = await c.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "short"})
        assert r.status_code == 200
    assert threads == [False, True]  # the long one in a worker thread, the short one inline
