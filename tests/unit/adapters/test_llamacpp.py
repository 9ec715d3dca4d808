"""llama.cpp adapter against real recorded llama-server exchanges (MockTransport replay)."""

from __future__ import annotations

import httpx
import pytest

from adapters.llamacpp import LlamaCppBackend
from app.core.conversation import GenerationParams
from app.core.errors import ContextLengthExceeded, GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk
from app.core.prompt import Prompt
from tests.support.wire import Replay, load

PROMPT = Prompt(token_ids=(200006, 1428, 200008, 3686, 200007, 200006, 173781))


async def _collect(replay: Replay, params: GenerationParams | None = None) -> list[Chunk]:
    async with httpx.AsyncClient(transport=replay.transport()) as client:
        backend = LlamaCppBackend(client, ["http://llama:8080"])
        return [c async for c in backend.stream(PROMPT, params or GenerationParams(max_tokens=32))]


async def test_stream_chunks_match_recorded_tokens() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    chunks = await _collect(replay)
    recorded = [e["data_json"] for e in replay.record["derived"]["sse_events"]]
    assert [list(c.token_ids) for c in chunks] == [e["tokens"] for e in recorded]
    ids = [t for c in chunks for t in c.token_ids]
    assert ids == [200005, 17196, 200008, 13225, 591, 261, 184876, 20049, 2359, 0, 200002]
    assert "".join(c.text for c in chunks) == "<|channel|>final<|message|>Hello from a scripted tiny model!"
    last = chunks[-1]
    assert last.finish is not None and last.finish.kind == "eos"
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.cached_tokens) == (59, 11, 58)
    assert all(c.finish is None for c in chunks[:-1])


async def test_request_body_sent_upstream() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    await _collect(replay, GenerationParams(max_tokens=7, temperature=0.5, top_p=0.9, seed=3,
                                            logprobs=True, top_logprobs=2))
    assert replay.paths == ["/completion"]
    body = replay.requests[0]
    assert body["prompt"] == list(PROMPT.token_ids)
    assert body["stream"] is True and body["return_tokens"] is True and body["cache_prompt"] is True
    assert (body["n_predict"], body["temperature"], body["top_p"], body["seed"], body["n_probs"]) == (
        7, 0.5, 0.9, 3, 2)
    assert "stop" not in body


async def test_logprobs_are_mapped_with_ids() -> None:
    chunks = await _collect(Replay("03b_completion_tokenids_stream_n_probs2"))
    first = chunks[0].logprobs
    assert first is not None and len(first) == 1
    assert first[0].token == "<|channel|>" and first[0].token_id == 200005 and first[0].logprob == 0.0
    assert [t.token_id for t in first[0].top] == [200005, 0]
    assert first[0].top[1].logprob == pytest.approx(-79.9609375)


@pytest.mark.parametrize(("name", "kind", "word"), [
    ("04d_completion_tokenids_stream_n_predict3", "length", None),
    ("04b_completion_tokenids_stream_stop", "stop_string", "scripted"),
    ("10b_toolmodel_completion_tokenids_stream", "eos", None),
])
async def test_finish_kinds(name: str, kind: str, word: str | None) -> None:
    chunks = await _collect(Replay(name))
    finish = chunks[-1].finish
    assert finish is not None and finish.kind == kind and finish.stop_string == word


@pytest.mark.parametrize(("name", "exc", "status", "code"), [
    ("05a2_error_prompt_longer_than_context_stream", ContextLengthExceeded, 400,
     "context_length_exceeded"),
    ("05b_error_malformed_json", UpstreamError, 502, "upstream_error"),
    ("05c_error_n_predict_string", InvalidRequest, 400, "upstream_rejected"),
])
async def test_http_errors_are_typed(name: str, exc: type[GatewayError], status: int,
                                     code: str) -> None:
    with pytest.raises(exc) as info:
        await _collect(Replay(name))
    assert info.value.status == status and info.value.code == code
    assert load(name)["response"]["status"] in (400, 500)


@pytest.mark.parametrize(("exc", "status", "code"), [
    (httpx.ConnectError("connection refused"), 502, "upstream_unavailable"),
    (httpx.ReadTimeout("timed out"), 504, "upstream_timeout"),
    (httpx.RemoteProtocolError("peer closed"), 502, "upstream_error"),
])
async def test_transport_errors_are_typed(exc: httpx.HTTPError, status: int, code: str) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    async with httpx.AsyncClient(transport=httpx.MockTransport(fail)) as client:
        backend = LlamaCppBackend(client, ["http://llama:8080"])
        with pytest.raises(GatewayError) as info:
            _ = [c async for c in backend.stream(PROMPT, GenerationParams(max_tokens=1))]
    assert (info.value.status, info.value.code) == (status, code)


async def test_mid_stream_error_event_raises() -> None:
    body = (b'data: {"content":"a","tokens":[64],"stop":false}\n\n'
            b'data: {"error":{"code":500,"message":"boom","type":"server_error"}}\n\n')

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=httpx.ByteStream(body))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        backend = LlamaCppBackend(client, ["http://llama:8080"])
        got: list[Chunk] = []
        with pytest.raises(UpstreamError, match="boom"):
            async for c in backend.stream(PROMPT, GenerationParams(max_tokens=1)):
                got.append(c)
    assert [c.token_ids for c in got] == [(64,)]


async def test_context_window_is_the_slot_size_from_props() -> None:
    """The recorded ``GET /props`` of a llama-server with ``-c 2048 -np 1``."""
    async with httpx.AsyncClient(transport=Replay("01b_get_props").transport()) as client:
        assert await LlamaCppBackend(client, ["http://llama:8080"]).context_window() == 2048
    async with httpx.AsyncClient(transport=Replay("03a_completion_tokenids_stream").transport()) as client:
        assert await LlamaCppBackend(client, ["http://llama:8080"]).context_window() is None
