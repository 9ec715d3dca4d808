"""A ``strict`` json_schema response format is checked on the finished answer (issue 13):
on Harmony the schema is only in the prompt, so an answer that is not the schema's JSON
must not come back as a normal ``stop``.  The backend is the llama.cpp fake streaming
scripted Harmony tokens in the recorded event shape."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.fake_llamacpp import script_ids
from tests.support.gateway import MODEL, gateway, sse_payloads
from tests.support.openresponses import check_stream
from tests.support.wire import RecordedBody

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}


def _event(tokens: list[int], *, stop: bool = False) -> bytes:
    body: dict[str, Any] = {"index": 0, "content": "", "tokens": tokens, "stop": stop,
                            "tokens_predicted": 1, "tokens_evaluated": 5}
    if stop:
        body.update(stop_type="eos", timings={"prompt_n": 5, "predicted_n": 1})
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _upstream(answer: str) -> httpx.MockTransport:
    """The whole answer; the continuation the gateway asks for once the final message opened
    (with ``json_schema``, app/engine/constrained.py) is its body, as written: a backend
    that does not hold it to the schema."""
    def handle(request: httpx.Request) -> httpx.Response:
        script = f"{answer}<|return|>"
        if "json_schema" not in json.loads(request.content):
            script = ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"
                      f"<|channel|>final<|message|>{script}")
        events = [*(_event([t]) for t in script_ids(script)), _event([], stop=True)]
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=RecordedBody(events))
    return httpx.MockTransport(handle)


def _chat(strict: bool | None, stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "weather?"}], "stream": stream,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "weather", "schema": SCHEMA, **({} if strict is None else {"strict": strict})}}}


GOOD = '{"city": "Paris", "temp": 21.5}'
BAD = {"prose": "It is sunny in Paris.", "wrong type": '{"city": "Paris", "temp": "warm"}',
       "missing": '{"city": "Paris"}', "extra": '{"city": "Paris", "temp": 1, "wind": 3}',
       "truncated": '{"city": "Par'}


async def test_a_conforming_answer_is_a_normal_stop() -> None:
    async with gateway(_upstream(GOOD)) as c:
        r = await c.post("/v1/chat/completions", json=_chat(True))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == GOOD
    assert r.json()["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("answer", list(BAD.values()), ids=list(BAD))
async def test_a_strict_answer_that_does_not_conform_is_an_error(answer: str) -> None:
    async with gateway(_upstream(answer)) as c:
        r = await c.post("/v1/chat/completions", json=_chat(True))
        assert r.status_code == 502
        error = r.json()["error"]
        assert error["code"] == "response_format_violation" and "strict response format" in error["message"]
        # streamed: the text went out as it came, then the stream ends with the error
        r = await c.post("/v1/chat/completions", json=_chat(True, stream=True))
        payloads = sse_payloads(r.text)
        assert payloads[-1] == "[DONE]"
        assert payloads[-2]["error"]["code"] == "response_format_violation"
        assert not any(ch.get("finish_reason") == "stop" for p in payloads[:-1]
                       for ch in p.get("choices", []))
        # Responses, streamed: one terminal response.failed
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": "weather?", "stream": True, "text": {"format": {
                "type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}}})
        final = check_stream([p for p in sse_payloads(r.text) if p != "[DONE]"])
        assert final["status"] == "failed" and final["error"]["code"] == "response_format_violation"


@pytest.mark.parametrize("strict", [False, None])
async def test_without_strict_the_answer_is_returned_as_written(strict: bool | None) -> None:
    async with gateway(_upstream(BAD["prose"])) as c:
        r = await c.post("/v1/chat/completions", json=_chat(strict))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == BAD["prose"]


def test_a_violation_never_quotes_the_models_output() -> None:
    """The error goes to the client: where the JSON breaks, not the (possibly hidden) text."""
    from app.engine.schema_check import answer_problem

    problem = answer_problem("<|channel|>analysis the secret plan", {"type": "object"})
    assert problem is not None and "secret" not in problem and "channel" not in problem
    assert "line 1 column 1" in problem
