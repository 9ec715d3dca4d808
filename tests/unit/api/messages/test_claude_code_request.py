"""Claude Code's real requests (``tests/fixtures/claude_code/``, recorded from the CLI) replayed
against the app on a fake llama.cpp: accepted as sent (``?beta=true``, five betas,
``cache_control``, ``context_management``, ``thinking.display: "omitted"``, a deferred
placeholder tool, a ``tool_reference`` result), with what reaches the model checked; and the
gaps around them (stop sequences, pings, deferred tools)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.config import GatewayConfig
from app.formats.harmony.vocab import harmony_encoding
from app.http import streaming
from tests.support.anthropic_sdk import clients
from tests.support.fake_llamacpp import FakeLlamaCpp, sse_events
from tests.support.gateway import MODEL, config, sse_payloads
from tests.support.paths import FIXTURES

FIRST = json.loads((FIXTURES / "claude_code" / "first_request.json").read_text())
TOOL_SEARCH = json.loads((FIXTURES / "claude_code" / "tool_search_request.json").read_text())
WRITE = ("<|channel|>analysis<|message|>Write it.<|end|><|start|>assistant<|channel|>commentary "
         'to=functions.Write <|constrain|>json<|message|>{"file_path":"a.txt","content":"hi"}<|call|>')


def _config() -> GatewayConfig:
    cfg = config(context_window=65536).model_dump()
    cfg["aliases"] = {"claude-sonnet-4-5-20250929": MODEL, "claude-haiku-4-5-20251001": MODEL}
    return GatewayConfig.model_validate(cfg)


def _prompt(fake: FakeLlamaCpp) -> str:
    ids = fake.requests[-1]["prompt"]
    return str(harmony_encoding().decode(ids))


async def _replay(recorded: dict[str, Any], fake: FakeLlamaCpp) -> Any:
    async with clients(fake.transport(), _config()) as c:
        return await c.http.post(recorded["path"], headers=recorded["headers"], json=recorded["body"])


def _deltas(events: list[Any], kind: str) -> list[Any]:
    return [e["delta"] for e in events if e.get("delta", {}).get("type") == kind]


async def test_claude_codes_first_request_is_served_as_sent() -> None:
    fake = FakeLlamaCpp(WRITE, prompt_tokens=18000)
    assert FIRST["body"]["thinking"]["display"] == "updates"
    r = await _replay(FIRST, fake)
    assert r.status_code == 200, r.text
    events = sse_payloads(r.text)
    assert [e["type"] for e in events[:2]] == ["message_start", "ping"]
    assert events[0]["message"]["model"] == "claude-sonnet-4-5-20250929"  # the name asked for
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "tool_use"]
    assert starts[1]["name"] == "Write"
    assert "".join(d["thinking"] for d in _deltas(events, "thinking_delta")) == "Write it."
    assert [d["signature"][:5] for d in _deltas(events, "signature_delta")] == ["ocm1."]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    prompt = _prompt(fake)
    assert "type Write = (_: {" in prompt and "type Bash = " in prompt  # the offered tools
    assert "DeferredToolPlaceholder" not in prompt  # defer_loading, never referenced
    assert "x-anthropic-billing-header" not in prompt and "cc_version" not in prompt
    assert "You are a Claude agent, built on Anthropic's Claude Agent SDK." in prompt
    assert "<|channel|>analysis" not in prompt.rsplit("<|start|>user", 1)[1]  # no stray history


async def test_display_omitted_sends_no_thinking_text_but_the_signature() -> None:
    omitted = json.loads(json.dumps(FIRST))
    omitted["body"]["thinking"]["display"] = "omitted"  # what claude -p sends without --verbose
    r = await _replay(omitted, FakeLlamaCpp(WRITE))
    events = sse_payloads(r.text)
    assert r.status_code == 200 and not _deltas(events, "thinking_delta")
    assert "Write it." not in r.text
    assert [d["signature"][:5] for d in _deltas(events, "signature_delta")] == ["ocm1."]


async def test_the_billing_header_does_not_change_the_prompt() -> None:
    """Claude Code's billing block differs in every session (``cc_version=...NNN``): the prompt
    the model sees, and so the backend's prompt cache, must not."""
    other = json.loads(json.dumps(FIRST))
    other["body"]["system"][0]["text"] = other["body"]["system"][0]["text"].replace(".923;", ".467;")
    assert other != FIRST
    prompts = []
    for recorded in (FIRST, other):
        fake = FakeLlamaCpp(WRITE)
        assert (await _replay(recorded, fake)).status_code == 200
        prompts.append(fake.requests[-1]["prompt"])
    assert prompts[0] == prompts[1]


async def test_a_tool_reference_loads_the_deferred_tool() -> None:
    fake = FakeLlamaCpp("<|channel|>final<|message|>Loaded.<|return|>")
    r = await _replay(TOOL_SEARCH, fake)
    assert r.status_code == 200, r.text
    prompt = _prompt(fake)
    assert "type WebFetch = (_: {" in prompt  # deferred, but a tool_reference named it
    assert "DeferredToolPlaceholder" not in prompt
    assert "Tool loaded: WebFetch" in prompt


async def test_a_reference_to_a_tool_that_is_not_offered_is_a_400() -> None:
    bad = json.loads(json.dumps(TOOL_SEARCH))
    bad["body"]["tools"] = [t for t in bad["body"]["tools"] if t["name"] != "WebFetch"]
    fake = FakeLlamaCpp("<|channel|>final<|message|>x<|return|>")
    r = await _replay(bad, fake)
    assert r.status_code == 400 and not fake.requests
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "WebFetch" in r.json()["error"]["message"]


async def test_count_tokens_takes_claude_codes_body_and_counts_the_served_prompt() -> None:
    fake = FakeLlamaCpp(WRITE)
    async with clients(fake.transport(), _config()) as c:
        served = await c.http.post(FIRST["path"], headers=FIRST["headers"], json=FIRST["body"])
        counted = await c.http.post("/v1/messages/count_tokens?beta=true", headers=FIRST["headers"],
                                    json=FIRST["body"])
    assert served.status_code == 200 and counted.status_code == 200, counted.text
    assert counted.json() == {"input_tokens": len(fake.requests[-1]["prompt"])}
    assert counted.json()["input_tokens"] > 10000


async def test_a_stop_sequence_ends_the_answer_and_is_named() -> None:
    body: Any = {"model": MODEL, "max_tokens": 100, "stop_sequences": ["STOP", "END"],
            "messages": [{"role": "user", "content": "Count."}]}
    script = "<|channel|>final<|message|>one two END three STOP four<|return|>"
    async with clients(FakeLlamaCpp(script).transport()) as c:
        msg = await c.sdk.messages.create(**body)
        async with c.sdk.messages.stream(**body) as stream:
            final = await stream.get_final_message()
        plain = await c.sdk.messages.create(**{**body, "stop_sequences": ["ABSENT"]})
    for m in (msg, final):
        assert m.stop_reason == "stop_sequence" and m.stop_sequence == "END"
        assert m.content[0].type == "text" and m.content[0].model_dump()["text"] == "one two "
    assert plain.stop_reason == "end_turn" and plain.stop_sequence is None


class _Slow(httpx.AsyncByteStream):
    """A llama.cpp stream that stalls for ``delay`` seconds after its first token."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def __aiter__(self) -> AsyncIterator[bytes]:
        first, *rest = sse_events("<|channel|>final<|message|>Late.<|return|>")
        yield first
        await asyncio.sleep(self.delay)
        for event in rest:
            yield event


async def test_an_idle_stream_gets_ping_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "PING_SECONDS", 0.2)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Slow(1.0))

    body: Any = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}
    async with clients(httpx.MockTransport(handler)) as c:
        r = await c.http.post("/v1/messages", json={**body, "stream": True})
        async with c.sdk.messages.stream(**body) as stream:
            final = await stream.get_final_message()  # the SDK skips the pings
    events = sse_payloads(r.text)
    pings = [i for i, e in enumerate(events) if e["type"] == "ping"]
    assert len(pings) >= 3 and "event: ping\ndata: {\"type\":\"ping\"}\n\n" in r.text
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    block = final.content[0]
    assert block.type == "text" and block.text == "Late."
