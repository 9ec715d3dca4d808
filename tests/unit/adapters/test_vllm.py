"""vLLM adapter against real recorded vLLM exchanges (MockTransport replay, byte for byte)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from adapters.vllm import VLLMBackend
from app.core.conversation import GenerationParams
from app.core.errors import ContextLengthExceeded, GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk
from app.core.prompt import Prompt
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

PROMPT = Prompt(token_ids=(200006, 1428, 200008, 3686, 200007, 200006, 173781))
FINAL_IDS = [200005, 17196, 200008, 13225, 591, 261, 184876, 20049, 2359, 0, 200002]


async def _collect(replay: Replay, params: GenerationParams | None = None) -> list[Chunk]:
    async with httpx.AsyncClient(transport=replay.transport()) as client:
        backend = VLLMBackend(client, ["http://vllm:8000"], "tiny")
        return [c async for c in backend.stream(PROMPT, params or GenerationParams(max_tokens=32))]


async def test_stream_with_usage() -> None:
    replay = Replay("03_completions_tokenids_stream_usage", "vllm")
    chunks = await _collect(replay, GenerationParams(max_tokens=32, temperature=0.5, seed=1))
    assert [t for c in chunks for t in c.token_ids] == FINAL_IDS
    finishes = [c.finish for c in chunks if c.finish]
    assert [f.kind for f in finishes] == ["eos"]
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (59, 11)
    body = replay.requests[0]
    assert replay.paths == ["/v1/completions"]
    assert body["prompt"] == list(PROMPT.token_ids) and body["model"] == "tiny"
    assert body["return_token_ids"] is True and body["skip_special_tokens"] is False
    assert body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (32, 0.5, 1)


async def test_logprobs_several_tokens_per_chunk() -> None:
    chunks = await _collect(Replay("04_completions_tokenids_stream_logprobs2", "vllm"),
                            GenerationParams(max_tokens=32, logprobs=True, top_logprobs=2))
    assert [t for c in chunks for t in c.token_ids] == FINAL_IDS
    assert any(len(c.token_ids) > 1 for c in chunks)  # the recording has a 10-token chunk
    for c in chunks:
        assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
    first = chunks[0].logprobs
    assert first is not None and first[0].token == "<|channel|>" and len(first[0].top) == 2


@pytest.mark.parametrize(("name", "kind", "word"), [
    ("05a_completions_tokenids_stream_stop", "stop_string", " scripted"),
    ("05d_completions_tokenids_stream_max_tokens3", "length", None),
    ("11b_toolmodel_completions_tokenids_stream", "eos", None),
])
async def test_finishes(name: str, kind: str, word: str | None) -> None:
    chunks = await _collect(Replay(name, "vllm"))
    (finish,) = [c.finish for c in chunks if c.finish]
    assert (finish.kind, finish.stop_string) == (kind, word)


@pytest.mark.parametrize(("name", "exc", "status"), [
    ("06a_error_prompt_longer_than_max_model_len", ContextLengthExceeded, 400),
    ("06g_error_temperature_negative_stream", InvalidRequest, 400),
    ("06d_error_unknown_model", UpstreamError, 502),
])
async def test_errors(name: str, exc: type[GatewayError], status: int) -> None:
    with pytest.raises(exc) as info:
        await _collect(Replay(name, "vllm"))
    assert info.value.status == status


def _strip(body: Any) -> Any:
    """Drop what legitimately differs between two runs (ids, timestamps, cache counts)."""
    if isinstance(body, dict):
        return {k: _strip(v) for k, v in body.items()
                if k not in ("id", "created", "created_at", "completed_at", "call_id", "cached_tokens")}
    if isinstance(body, list):
        return [_strip(v) for v in body]
    return body


@pytest.mark.parametrize(("llamacpp", "vllm", "tools"), [
    ("03a_completion_tokenids_stream", "03_completions_tokenids_stream_usage", False),
    ("10b_toolmodel_completion_tokenids_stream", "11b_toolmodel_completions_tokenids_stream", True),
])
async def test_same_answer_as_llamacpp(llamacpp: str, vllm: str, tools: bool) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    chat: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    responses: dict[str, Any] = {"model": MODEL, "input": "hi"}
    if tools:
        chat["tools"] = [tool]
        responses["tools"] = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    results = []
    for cfg, replay in ((config(), Replay(llamacpp)), (config(backend="vllm"), Replay(vllm, "vllm"))):
        async with gateway(replay.transport(), cfg) as c:
            a = (await c.post("/v1/chat/completions", json=chat)).json()
            b = (await c.post("/v1/responses", json=responses)).json()
        results.append((_strip(a), _strip(b)))
    assert results[0] == results[1]
    assert results[0][0]["choices"][0]["finish_reason"] == ("tool_calls" if tools else "stop")


def test_json_schema_becomes_structured_outputs() -> None:
    backend = VLLMBackend(httpx.AsyncClient(), ["http://vllm.test"], "tiny")
    schema = {"type": "object"}
    body = backend.request_body(Prompt(token_ids=(1, 2), json_schema=schema), GenerationParams(n=1))
    assert body["structured_outputs"] == {"json": schema}
    assert "structured_outputs" not in backend.request_body(Prompt(token_ids=(1, 2)), GenerationParams())


def test_text_safe_prompt_goes_as_text_and_segments_alone_are_refused() -> None:
    backend = VLLMBackend(httpx.AsyncClient(), ["http://vllm.test"], "tiny")
    text = "<|start|>user<|message|>hi<|end|><|start|>assistant"
    assert backend.request_body(Prompt(token_ids=None, text=text), GenerationParams())["prompt"] == text
    with pytest.raises(InvalidRequest):
        backend.request_body(Prompt(token_ids=None, segments=(("<x>", True), ("user", False))),
                             GenerationParams())


def _models_and(record: Replay) -> httpx.MockTransport:
    """The recorded ``GET /v1/models`` (tiny, max_model_len 2048) next to a generation recording."""
    models = Replay("01a_get_v1_models", "vllm")

    def handler(request: httpx.Request) -> httpx.Response:
        return models(request) if request.url.path == "/v1/models" else record(request)
    return httpx.MockTransport(handler)


async def test_window_and_readiness_come_from_v1_models() -> None:
    async with httpx.AsyncClient(transport=_models_and(Replay("03_completions_tokenids_stream_usage",
                                                              "vllm"))) as client:
        served = VLLMBackend(client, ["http://vllm:8000"], "tiny")
        wrong = VLLMBackend(client, ["http://vllm:8000"], "no-such-model")
        assert await served.context_window() == 2048 and await served.ready()
        assert await wrong.context_window() is None and not await wrong.ready()


async def test_the_backend_window_bounds_max_tokens_and_prompts() -> None:
    """Configured 8192 against vLLM's --max-model-len 2048: no max_tokens beyond 2048 is sent,
    and a prompt over 2048 tokens is the gateway's own context_length_exceeded 400."""
    record = Replay("03_completions_tokenids_stream_usage", "vllm")
    cfg = config(backend="vllm", context_window=8192, upstream_model="tiny")
    async with gateway(_models_and(record), cfg) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": "hi"}]})
        sent = record.requests[-1]
        assert sent["max_tokens"] == 2048 - len(sent["prompt"]), r.text
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": "word " * 2100}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "2048" in r.json()["error"]["message"]
