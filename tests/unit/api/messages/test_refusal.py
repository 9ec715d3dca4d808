"""``stop_reason: "refusal"``: when the backend declined the answer.

Anthropic's API stops with ``refusal`` when its classifiers intervene; the text so far stays,
no message is added, usage is reported.  What the gateway can know of a decline is its
upstream's: an OpenAI-compatible server's ``finish_reason: "content_filter"`` and a model's
``refusal`` field (its text is the answer).  Both go through the real app on the fake
OpenAI-compatible upstream, non-streaming and streamed (every raw event validated against the
``anthropic`` SDK's types), and an ordinary ``stop`` from the same upstream stays ``end_turn``.
The Chat Completions view of the same upstream says ``content_filter`` (OpenAI's reason).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.support.anthropic_sdk import clients
from tests.support.chat_fakes import FakeChat, Script
from tests.support.gateway import MODEL, config, sse_payloads

HI: Any = [{"role": "user", "content": "Tell me something."}]
PARTIAL = "Here is the start of"
REFUSAL = "I can't help with that."


def _cfg() -> Any:
    return config(backend="openai", prompt_format="chat", upstream_model="upstream-model")


def _refusal_events() -> list[bytes]:
    """OpenAI's shape for a model's refusal: ``delta.refusal`` pieces, then ``stop``."""
    def event(delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None) -> bytes:
        body: dict[str, Any] = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1,
                                "model": "upstream-model",
                                "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                                      "finish_reason": finish}]}
        if usage is not None:
            body["usage"] = usage
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    return [event({"role": "assistant", "content": None, "refusal": ""}),
            event({"refusal": "I can't help"}), event({"refusal": " with that."}),
            event({}, "stop"),
            event(None, usage={"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}),
            b"data: [DONE]\n\n"]


def _upstream(kind: str) -> FakeChat:
    if kind == "content_filter":
        return FakeChat(Script([("text", PARTIAL)], finish="content_filter"), "openai")
    if kind == "stop":
        return FakeChat(Script([("text", PARTIAL)]), "openai")
    fake = FakeChat(Script([]), "openai")
    fake.body = _refusal_events()
    return fake


EXPECTED = {"content_filter": ("refusal", PARTIAL), "refusal": ("refusal", REFUSAL),
            "stop": ("end_turn", PARTIAL)}


@pytest.mark.parametrize("kind", ["content_filter", "refusal", "stop"])
async def test_non_streaming_message_stops_with_refusal(kind: str) -> None:
    async with clients(_upstream(kind).transport(), _cfg()) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=100, messages=HI)
    reason, text = EXPECTED[kind]
    assert msg.stop_reason == reason and msg.stop_sequence is None
    assert [(b.type, getattr(b, "text", None)) for b in msg.content] == [("text", text)]
    assert msg.usage.output_tokens > 0  # billed up to the refusal, as Anthropic's


@pytest.mark.parametrize("kind", ["content_filter", "refusal", "stop"])
async def test_stream_ends_with_refusal_in_message_delta(kind: str) -> None:
    async with clients(_upstream(kind).transport(), _cfg()) as c:
        r = await c.http.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, "messages": HI,
                                                    "stream": True})
        async with c.sdk.messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
            final = await stream.get_final_message()
    assert r.status_code == 200
    payloads = [p for p in sse_payloads(r.text) if p["type"] != "ping"]
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    for payload in payloads:
        adapter.validate_python(payload)
    reason, text = EXPECTED[kind]
    assert [p["type"] for p in payloads][-2:] == ["message_delta", "message_stop"]
    assert payloads[-2]["delta"] == {"stop_reason": reason, "stop_sequence": None}
    assert payloads[-2]["usage"]["output_tokens"] > 0
    streamed = "".join(p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta")
    assert streamed == text and "error" not in [p["type"] for p in payloads]
    assert final.stop_reason == reason and [b.type for b in final.content] == ["text"]


@pytest.mark.parametrize("kind", ["content_filter", "refusal"])
async def test_chat_completions_view_says_content_filter(kind: str) -> None:
    async with clients(_upstream(kind).transport(), _cfg()) as c:
        r = await c.http.post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["content"] == EXPECTED[kind][1]


@pytest.mark.parametrize("kind", ["content_filter", "refusal", "stop"])
async def test_responses_view_is_incomplete_with_reason_content_filter(kind: str) -> None:
    """OpenAI's Responses API ends a filtered answer ``incomplete`` with ``reason:
    content_filter`` (the text so far kept), streamed and not."""
    async with clients(_upstream(kind).transport(), _cfg()) as c:
        r = await c.http.post("/v1/responses", json={"model": MODEL, "input": HI})
        s = await c.http.post("/v1/responses", json={"model": MODEL, "input": HI, "stream": True})
    body = r.json()
    refused = kind != "stop"
    assert body["status"] == ("incomplete" if refused else "completed")
    assert body["incomplete_details"] == ({"reason": "content_filter"} if refused else None)
    assert body["output"][0]["content"][0]["text"] == EXPECTED[kind][1]
    events = [e for e in sse_payloads(s.text) if isinstance(e, dict)]
    terminal = [e["type"] for e in events if e["type"] in ("response.completed", "response.incomplete",
                                                           "response.failed")]
    assert terminal == ["response.incomplete" if refused else "response.completed"]
