"""``POST /v1/responses/input_tokens``: the prompt a create would send, counted the model's way."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from app.config import GatewayConfig
from tests.support.chat_fakes import FakeChat, Script
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.fake_template_llamacpp import FakeTemplateLlamaCpp
from tests.support.gateway import MODEL, config, gateway
from tests.support.openresponses import validate_error_body

ANSWER = "<|channel|>final<|message|>Hi.<|return|>"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
BODY: dict[str, Any] = {"model": MODEL, "instructions": "Answer briefly.", "tools": [WEATHER],
                        "reasoning": {"effort": "high"},
                        "input": [{"role": "user", "content": "Weather in Paris?"}]}


async def _count(c: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await c.post("/v1/responses/input_tokens", json=body)


async def test_harmony_count_equals_the_prompt_a_create_sends() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        r = await _count(c, **BODY)
        assert r.status_code == 200, r.text
        created = await c.post("/v1/responses", json=BODY)
        assert created.status_code == 200
        # a follow-up through previous_response_id counts the whole chain as the create would
        follow = {"model": MODEL, "previous_response_id": created.json()["id"], "input": "And Oslo?"}
        chained = await _count(c, **follow)
        await c.post("/v1/responses", json=follow)
    assert r.json() == {"object": "response.input_tokens", "input_tokens": len(up.requests[0]["prompt"])}
    assert chained.json()["input_tokens"] == len(up.requests[1]["prompt"])
    assert "ocm-token-count" not in r.headers


async def test_the_openai_sdk_parses_it() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        sdk = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=c,  # type: ignore[arg-type]
                                 max_retries=0)
        counted = await sdk.responses.input_tokens.count(model=MODEL, input="Hello there")
    assert counted.object == "response.input_tokens" and counted.input_tokens > 10


async def test_template_model_counts_with_the_backend_tokenizer() -> None:
    fake = FakeTemplateLlamaCpp(["Hi"])

    def upstream(request: httpx.Request) -> httpx.Response:  # no /props here: POSTs only
        return fake(request) if request.method == "POST" else httpx.Response(404)

    cfg = config(prompt_format="template", template={"builtin": "gemma3"})
    async with gateway(httpx.MockTransport(upstream), cfg) as c:
        r = await _count(c, model=MODEL, input="hello")
        await c.post("/v1/responses", json={"model": MODEL, "input": "hello"})
    assert fake.tokenize_calls and r.json()["input_tokens"] == len(fake.completions[0]["prompt"])


async def test_chat_backend_count_is_a_flagged_estimate() -> None:
    fake = FakeChat(Script([("text", "Hi")]), "ollama")
    async with gateway(fake.transport(), config(backend="ollama", prompt_format="chat")) as c:
        r = await _count(c, model=MODEL, input="hello there, how are you?")
    assert r.status_code == 200 and fake.requests == []
    assert r.json()["ocm:estimated"] is True and r.json()["input_tokens"] > 0
    assert r.headers["ocm-token-count"] == "estimated"


async def test_truncation_auto_counts_what_would_be_sent() -> None:
    up = FakeLlamaCpp(ANSWER)
    long = [{"role": "user", "content": "word " * 600}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "Short question?"}]
    async with gateway(up.transport(), config(context_window=400)) as c:
        whole = await _count(c, model=MODEL, input=long)
        cut = await _count(c, model=MODEL, input=long, truncation="auto")
    assert whole.json()["input_tokens"] > 400 > cut.json()["input_tokens"]


async def test_errors() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        missing = await _count(c, input="hi")
        unknown = await _count(c, model="nope", input="hi")
        bad_prev = await _count(c, model=MODEL, previous_response_id="resp_nope", input="hi")
        extra = await _count(c, model=MODEL, input="hi", stream=True)
    for r, status, param in ((missing, 400, "model"), (unknown, 404, "model"),
                             (bad_prev, 404, "previous_response_id"), (extra, 400, "stream")):
        assert r.status_code == status and r.json()["error"]["param"] == param, r.text
        validate_error_body(r.json())


async def test_default_model_applies_when_the_sdk_omits_it() -> None:
    data = config().model_dump()
    async with gateway(FakeLlamaCpp(ANSWER).transport(),
                       GatewayConfig.model_validate({**data, "default_model": MODEL})) as c:
        r = await _count(c, input="hi")
    assert r.status_code == 200 and r.json()["input_tokens"] > 0
