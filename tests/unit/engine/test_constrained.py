"""The final answer constrained to a response format's schema in two upstream requests
(app/engine/constrained.py).  The upstream is a llama.cpp fake streaming Harmony tokens one
per event in the recorded event shape; it answers the second request (the one with
``json_schema``) with the schema's JSON, as llama.cpp's grammar would make the model do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.fake_llamacpp import script_ids
from tests.support.gateway import MODEL, config, gateway, sse_payloads
from tests.support.wire import RecordedBody, load, recorded_response

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
REASONING = "<|channel|>analysis<|message|>Answer in JSON.<|end|><|start|>assistant"
HEADER = "<|channel|>final<|message|>"
PROSE = "Sure! The answer is one.<|return|>"
JSON_ANSWER = '{"a": 1}<|return|>'


def _event(tokens: list[int], *, stop: bool = False, n_prompt: int = 0, n_out: int = 0) -> bytes:
    body: dict[str, Any] = {"index": 0, "content": "", "tokens": tokens, "stop": stop}
    if stop:
        body.update(stop_type="eos", tokens_evaluated=n_prompt, tokens_predicted=n_out,
                    timings={"cache_n": n_prompt - 1})
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Body(httpx.AsyncByteStream):
    """The events, one per read; remembers how many were read when it was closed."""

    def __init__(self, events: list[bytes], log: list[tuple[int, int]]) -> None:
        self.events, self.log, self.read = events, log, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            self.read += 1
            yield event

    async def aclose(self) -> None:
        self.log.append((self.read, len(self.events)))


class Upstream:
    """First request: reasoning, the final header, then prose (never read to the end);
    a request with json_schema: the JSON answer."""

    def __init__(self, first: str = REASONING + HEADER + PROSE) -> None:
        self.first = first
        self.requests: list[dict[str, Any]] = []
        self.closes: list[tuple[int, int]] = []  # (events read, events there were) per request

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        ids = script_ids(JSON_ANSWER if "json_schema" in body else self.first)
        events = [_event([t]) for t in ids]
        events.append(_event([], stop=True, n_prompt=len(body["prompt"]), n_out=len(ids)))
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=Body(events, self.closes))


def _chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "one?"}], "stream": stream,
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
            **extra}


async def test_reasoning_is_free_and_the_answer_is_constrained() -> None:
    up = Upstream()
    async with gateway(httpx.MockTransport(up)) as c:
        r = await c.post("/v1/chat/completions", json=_chat(max_tokens=200))
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["content"] == '{"a": 1}' and message["reasoning_content"] == "Answer in JSON."
    first, second = up.requests
    assert "json_schema" not in first and second["json_schema"] == SCHEMA
    generated = script_ids(REASONING + HEADER)
    assert second["prompt"] == first["prompt"] + generated  # continues exactly where it stopped
    assert second["n_predict"] == 200 - len(generated)
    # the first request was closed right after the header, its prose never read
    assert up.closes[0][0] <= len(generated) + 1 < up.closes[0][1]
    usage = r.json()["usage"]  # one generation's numbers
    assert usage["prompt_tokens"] == len(first["prompt"])
    assert usage["completion_tokens"] == len(generated) + len(script_ids(JSON_ANSWER))


async def test_streamed_the_same() -> None:
    async with gateway(httpx.MockTransport(Upstream())) as c:
        r = await c.post("/v1/chat/completions", json=_chat(stream=True))
    chunks = [p for p in sse_payloads(r.text) if p != "[DONE]"]
    text = "".join(ch["delta"].get("content") or "" for p in chunks for ch in p["choices"])
    assert text == '{"a": 1}' and [ch["finish_reason"] for p in chunks for ch in p["choices"]
                                   if ch["finish_reason"]] == ["stop"]


@pytest.mark.parametrize("first", [
    '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"x":1}<|call|>',
    "<|channel|>analysis<|message|>Only thinking.<|end|>",
])
async def test_no_final_answer_one_request(first: str) -> None:
    up = Upstream(first)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with gateway(httpx.MockTransport(up)) as c:
        await c.post("/v1/chat/completions", json=_chat(tools=tools))
    assert len(up.requests) == 1 and "json_schema" not in up.requests[0]


async def test_budget_spent_before_the_answer_is_length() -> None:
    up = Upstream()
    n = len(script_ids(REASONING + HEADER))
    async with gateway(httpx.MockTransport(up)) as c:
        r = await c.post("/v1/chat/completions", json=_chat(max_tokens=n))
    assert r.json()["choices"][0]["finish_reason"] == "length" and len(up.requests) == 1


async def test_without_a_response_format_one_unconstrained_request() -> None:
    up = Upstream()
    body = _chat()
    del body["response_format"]
    async with gateway(httpx.MockTransport(up)) as c:
        r = await c.post("/v1/chat/completions", json=body)
    assert r.json()["choices"][0]["message"]["content"] == "Sure! The answer is one."
    assert len(up.requests) == 1


class RecordedVLLM:
    """vLLM's recorded streams: the first request gets ``04_..._logprobs2`` (whose second event
    carries ten tokens, the final header's end among them), a request with structured outputs
    gets ``03_..._usage`` without its first three events (the final header it continues after),
    usage as vLLM counts the continuation.  Its body is the recording's prose: this test is
    about where the generation is cut and how it is continued, not the grammar."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        body = json.loads(request.content)
        self.requests.append(body)
        if "structured_outputs" not in body:
            return recorded_response(load("04_completions_tokenids_stream_logprobs2", "vllm"))
        record = load("03_completions_tokenids_stream_usage", "vllm")
        chunks = [c["text"] for c in record["response"]["chunks"]]
        events = [json.loads(c.split("data: ", 1)[1]) for c in chunks if c.startswith("data: {")][3:]
        for event in events:
            if event.get("usage"):
                n_out = 8  # "Hello from a scripted tiny model!<|return|>"
                event["usage"] = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n_out,
                                  "total_tokens": len(body["prompt"]) + n_out}
        data = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=RecordedBody(data))


async def test_vllm_structured_outputs_continue_after_the_header() -> None:
    up = RecordedVLLM()
    cfg = config(backend="vllm", upstream_model="tiny")
    async with gateway(httpx.MockTransport(up), cfg) as c:
        r = await c.post("/v1/chat/completions", json=_chat(max_tokens=64))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Hello from a scripted tiny model!"
    first, second = up.requests
    assert "structured_outputs" not in first and second["structured_outputs"] == {"json": SCHEMA}
    header = [200005, 17196, 200008]  # cut inside the recording's ten-token event
    assert second["prompt"] == first["prompt"] + header and second["max_tokens"] == 64 - 3
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] == len(first["prompt"])
    assert usage["completion_tokens"] == 3 + 8
