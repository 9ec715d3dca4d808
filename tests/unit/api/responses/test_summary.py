"""``reasoning.summary``: summary parts and ``response.reasoning_summary_*`` events
(app/api/responses/summary.py, encode.py), checked against the Open Responses document and the OpenAI
SDK's own types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.api.responses.summary import CONCISE_CHARS, concise
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway
from tests.support.openresponses import check_stream

pytestmark = pytest.mark.asyncio
THOUGHT = "The user greets me. I will reply politely and briefly."
SCRIPT = (f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"
          "<|start|>assistant<|channel|>final<|message|>Hi there!<|return|>")
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.mark.parametrize("summary", ["auto", "detailed", "concise"])
async def test_summaries_stream_and_fold(summary: str) -> None:
    async with gateway(FakeLlamaCpp(SCRIPT).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": True,
                                                "reasoning": {"summary": summary}})
        events = _sse(r.text)
        final = check_stream(events)
        for event in events:  # the OpenAI SDK types every event (the openai dialect)
            if event["type"].startswith("response.reasoning_summary"):
                EVENTS.validate_python(event)
        item = final["output"][0]
        assert item["summary"] == [{"type": "summary_text", "text": THOUGHT}]
        assert final["reasoning"]["summary"] == summary
        deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta")
        assert deltas == THOUGHT
        types = [e["type"] for e in events]
        assert types.count("response.reasoning_summary_part.added") == 1
        assert types.index("response.reasoning_summary_part.done") < types.index("response.output_item.done")
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                "reasoning": {"summary": summary}})
        Response.model_validate(r.json())
        assert r.json()["output"][0]["summary"] == item["summary"]


async def test_without_summary_there_is_none() -> None:
    async with gateway(FakeLlamaCpp(SCRIPT).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert r.json()["output"][0]["summary"] == [] and r.json()["reasoning"]["summary"] is None


async def test_concise_is_a_bounded_excerpt_at_a_sentence() -> None:
    short = concise("First thought here. " * 50)
    assert len(short) <= CONCISE_CHARS + 2 and short.endswith("here. …")
    assert concise("One.\n\n  Two.") == "One. Two."
    assert concise("x" * 1000) == "x" * CONCISE_CHARS + " …"  # no space to cut at
