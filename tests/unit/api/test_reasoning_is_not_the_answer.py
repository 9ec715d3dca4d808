"""Harmony output that is not a ``final`` message never reaches ``content`` / ``output_text``
(issue 35, item 6), on the four surfaces: chat, chat stream, Responses, Responses stream; the
upstream is a llama.cpp fake returning the scripted token ids."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway, sse_payloads

FINAL = "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>"
THINK = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"
SCRIPTS = {
    "no channel": "<|message|>SECRET<|end|>" + FINAL,
    "commentary to=assistant": "<|channel|>commentary to=assistant<|message|>SECRET<|end|>" + FINAL,
    "no channel after analysis": THINK + "<|message|>SECRET<|end|>" + FINAL,
    "role alone after analysis": THINK + " <|message|>SECRET<|end|>" + FINAL,
    "content type alone": "<|constrain|>json<|message|>SECRET<|end|>" + FINAL,
    "final to=assistant": "<|channel|>final to=assistant<|message|>SECRET<|end|>" + FINAL,
    "unknown channel": "<|channel|>summary<|message|>SECRET<|end|>" + FINAL,
    "analysis to=assistant": "<|channel|>analysis to=assistant<|message|>SECRET<|end|>" + FINAL,
}


async def _chat(script: str, stream: bool) -> tuple[str, str]:
    """(content, reasoning_content) as the client sees them."""
    async with gateway(FakeLlamaCpp(script).transport()) as client:
        r = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream})
    assert r.status_code == 200, r.text
    if not stream:
        message = r.json()["choices"][0]["message"]
        assert r.json()["choices"][0]["finish_reason"] == "stop"
        return message["content"] or "", message.get("reasoning_content") or ""
    deltas = [e["choices"][0]["delta"] for e in sse_payloads(r.text)[:-1] if e["choices"]]
    return ("".join(d.get("content") or "" for d in deltas),
            "".join(d.get("reasoning_content") or "" for d in deltas))


async def _responses(script: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """(the answer text the client sees, the resource)."""
    async with gateway(FakeLlamaCpp(script).transport()) as client:
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": stream})
    assert r.status_code == 200, r.text
    if not stream:  # output_text: what the SDKs join from the message items
        resource = r.json()
        return "".join(p["text"] for i in resource["output"] if i["type"] == "message"
                       for p in i["content"] if p["type"] == "output_text"), resource
    events = [e for e in sse_payloads(r.text) if isinstance(e, dict)]
    completed = [e["response"] for e in events if e["type"] == "response.completed"]
    assert len(completed) == 1, [e["type"] for e in events]
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    return streamed, completed[0]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(SCRIPTS))
async def test_chat_shows_only_the_final_message(case: str, stream: bool) -> None:
    content, reasoning = await _chat(SCRIPTS[case], stream)
    assert content == "Answer."
    assert "SECRET" in reasoning


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(SCRIPTS))
async def test_responses_show_only_the_final_message(case: str, stream: bool) -> None:
    text, resource = await _responses(SCRIPTS[case], stream)
    assert text == "Answer."
    messages = [i for i in resource["output"] if i["type"] == "message"]
    assert [p["text"] for m in messages for p in m["content"]] == ["Answer."]
    assert [m.get("phase") for m in messages] in ([None], ["final_answer"])
    reasoning = [i for i in resource["output"] if i["type"] == "reasoning"]
    assert "SECRET" in str(reasoning)
    assert resource["status"] == "completed"


async def test_a_preamble_is_still_shown() -> None:
    """The neighbour that stays: commentary without a recipient is meant for the user."""
    script = "<|channel|>commentary<|message|>Let me see.<|end|>" + FINAL
    content, _ = await _chat(script, stream=False)
    assert content == "Let me see.Answer."
    _, resource = await _responses(script, stream=True)
    phases = [(m.get("phase"), m["content"][0]["text"]) for m in resource["output"] if m["type"] == "message"]
    assert phases == [("commentary", "Let me see."), ("final_answer", "Answer.")]
