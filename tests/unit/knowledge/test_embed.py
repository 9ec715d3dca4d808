"""The vector stores' embedder (:mod:`app.knowledge.embed`): batches in order, unit vectors,
retries of transient upstream failures only, the gateway's own errors when it cannot, and a
vector store refused for another model; wired to a real backend's passthrough over a mock
transport (the body each server kind gets)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx
import orjson
import pytest
from pydantic import ValidationError

from adapters.llamacpp import LlamaCppBackend
from adapters.ollama import OllamaBackend
from adapters.passthrough import NotSupported
from app.config import GatewayConfig, load_config
from app.core.errors import (
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.knowledge.embed import MAX_BACKOFF, UpstreamEmbedder, check_space, embedder_for, transient
from app.knowledge.vectors import Embedder, EmbeddingModelChanged, EmbeddingSpace


class ScriptedClient:
    """Answers each call with the next scripted outcome (an exception, or vectors)."""

    def __init__(self, *outcomes: BaseException | list[list[float]] | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[list[str], int | None]] = []

    async def embed(self, inputs: list[str] | list[list[int]], dimensions: int | None,
                    ) -> tuple[list[list[float]], int]:
        self.calls.append(([str(i) for i in inputs], dimensions))
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is None:  # a vector per text that says which text it was: [len, 1, 0]
            outcome = [[float(len(t)), 1.0, 0.0] for t in inputs]
        return outcome, 10 * len(inputs)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def make(client: ScriptedClient, **kwargs: Any) -> tuple[UpstreamEmbedder, Sleeps]:
    sleeps = Sleeps()
    return UpstreamEmbedder("emb", client, sleep=sleeps, **kwargs), sleeps


def unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


async def test_batches_in_order_with_unit_vectors() -> None:
    client = ScriptedClient()
    embedder, _ = make(client, batch_size=2, request_dimensions=3)
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = await embedder.embed(texts)
    assert [c[0] for c in client.calls] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert all(c[1] == 3 for c in client.calls)  # [knowledge] embedding_dimensions, passed on
    assert vectors == [unit([len(t), 1.0, 0.0]) for t in texts]
    assert embedder.dimensions == 3 and embedder.prompt_tokens == 50
    assert embedder.space == EmbeddingSpace("emb", 3)
    assert await embedder.embed([]) == [] and len(client.calls) == 3


@pytest.mark.parametrize("error", [
    UpstreamError("connection refused", code="upstream_unavailable"),
    UpstreamTimeout("slow"),
    UpstreamError("HTTP 503", status=503),
    UpstreamRateLimited("busy", retry_after=None),
])
async def test_transient_failures_are_retried_with_backoff(error: GatewayError) -> None:
    client = ScriptedClient(error, error)
    embedder, sleeps = make(client, max_attempts=3, backoff=0.5)
    assert await embedder.embed(["x"]) == [unit([1.0, 1.0, 0.0])]
    assert len(client.calls) == 3 and sleeps.delays == [0.5, 1.0]


async def test_the_last_failure_is_raised_once_the_tries_are_spent() -> None:
    client = ScriptedClient(*(UpstreamError(f"down {i}") for i in range(5)))
    embedder, sleeps = make(client, max_attempts=3, backoff=0.01)
    with pytest.raises(UpstreamError, match="down 2"):
        await embedder.embed(["x"])
    assert len(client.calls) == 3 and sleeps.delays == [0.25, 0.5]  # at least MIN_BACKOFF


async def test_a_retry_after_is_honoured_up_to_the_cap() -> None:
    client = ScriptedClient(UpstreamRateLimited("slow down", retry_after=2.0),
                            UpstreamRateLimited("slow down", retry_after=3600.0))
    embedder, sleeps = make(client, max_attempts=3)
    await embedder.embed(["x"])
    assert sleeps.delays == [2.0, MAX_BACKOFF]


@pytest.mark.parametrize("error", [
    InvalidRequest("The backend rejected the request: bad", code="upstream_rejected"),
    NotSupported("no /v1/embeddings", param="model"),
    UpstreamError("The backend answered 404: no such model", code="upstream_not_found"),
    ContextLengthExceeded("too long", param="messages"),
])
async def test_other_failures_are_raised_at_once(error: GatewayError) -> None:
    client = ScriptedClient(error)
    embedder, sleeps = make(client, max_attempts=5)
    with pytest.raises(type(error)) as raised:
        await embedder.embed(["x"])
    assert raised.value is error and len(client.calls) == 1 and sleeps.delays == []
    assert not transient(error)


async def test_llama_cpp_too_large_500_is_a_context_length_400_without_retry() -> None:
    client = ScriptedClient(UpstreamError("The backend failed with HTTP 500: input (602 tokens) is "
                                          "too large to process. increase the physical batch size"))
    embedder, sleeps = make(client, max_attempts=5, max_input_tokens=256)
    with pytest.raises(ContextLengthExceeded) as raised:
        await embedder.embed(["long"])
    assert raised.value.status == 400 and raised.value.param == "input"
    assert "256" in raised.value.message and "'emb'" in raised.value.message
    assert len(client.calls) == 1 and sleeps.delays == []


@pytest.mark.parametrize(("answer", "message"), [
    ([[0.0, 0.0, 0.0]], "cannot be normalised"),
    ([[float("nan"), 1.0, 0.0]], "cannot be normalised"),
    ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], "2 vectors for 1 texts"),
])
async def test_unusable_answers_are_upstream_errors(answer: list[list[float]], message: str) -> None:
    embedder, _ = make(ScriptedClient(answer))
    with pytest.raises(UpstreamError, match=message):
        await embedder.embed(["x"])


async def test_a_change_of_vector_length_is_an_upstream_error() -> None:
    embedder, _ = make(ScriptedClient([[1.0, 0.0]], [[1.0, 0.0, 0.0]]))
    await embedder.embed(["x"])
    with pytest.raises(UpstreamError, match="3 values after vectors of 2"):
        await embedder.embed(["y"])


def test_a_store_of_another_model_or_length_is_refused() -> None:
    check_space("vs_1", None, EmbeddingSpace("b", 384))  # a store with no vectors yet
    check_space("vs_1", EmbeddingSpace("b", 384), EmbeddingSpace("b", 384))
    check_space("vs_1", EmbeddingSpace("b", None), EmbeddingSpace("b", 384))
    check_space("vs_1", EmbeddingSpace("b", 384), EmbeddingSpace("b", None))
    with pytest.raises(EmbeddingModelChanged) as raised:
        check_space("vs_1", EmbeddingSpace("a", 384), EmbeddingSpace("b", 384))
    error = raised.value
    assert error.status == 409 and error.code == "embedding_model_changed" and not error.retryable
    assert "vs_1" in error.message and "'a'" in error.message and "'b'" in error.message
    with pytest.raises(EmbeddingModelChanged, match="768"):
        check_space("vs_1", EmbeddingSpace("b", 768), EmbeddingSpace("b", 384))


def _config(**knowledge: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({
        "upstream": {"max_attempts": 4, "retry_backoff": 0.5},
        "models": {"chat": {"base_urls": ["http://chat"]}, "emb": {"base_urls": ["http://emb"]}},
        "knowledge": knowledge})


def test_the_config_names_a_configured_model_within_bounds() -> None:
    config = _config(embedding_model="emb", embedding_batch=8, max_input_tokens=256)
    assert config.knowledge.embedding_model == "emb" and config.knowledge.embedding_batch == 8
    with pytest.raises(ValidationError, match="embedding_model 'nope' is not a model"):
        _config(embedding_model="nope")
    for bad in ({"embedding_batch": 0}, {"embedding_batch": 4096}, {"max_input_tokens": 4},
                {"ingest_concurrency": 0}, {"ingest_poll_seconds": 0}, {"unknown": 1}):
        with pytest.raises(ValidationError):
            _config(**bad)
    env = load_config(None, env={"OCMGW_MODEL": "emb", "OCMGW_BACKEND_URL": "http://e",
                                 "OCMGW__knowledge__embedding_model": "emb"})
    assert env.knowledge.embedding_model == "emb" and env.knowledge.max_input_tokens == 512


def _transport(seen: list[tuple[str, dict[str, Any]]], answer: dict[str, Any]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, orjson.loads(request.content)))
        return httpx.Response(200, json=answer)
    return httpx.MockTransport(handle)


async def test_embedder_for_a_llama_cpp_model_posts_what_v1_embeddings_posts() -> None:
    assert embedder_for(_config(), object()) is None  # no [knowledge] embedding_model
    config = _config(embedding_model="emb", embedding_batch=2, max_input_tokens=256)
    seen: list[tuple[str, dict[str, Any]]] = []
    answer = {"data": [{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [3.0, 4.0]}],
              "usage": {"prompt_tokens": 7}}
    async with httpx.AsyncClient(transport=_transport(seen, answer)) as client:
        embedder = embedder_for(config, LlamaCppBackend(client, ["http://emb"]))
        assert embedder is not None
        typed: Embedder = embedder  # the seam vector stores use
        assert (typed.model, typed.max_input_tokens, typed.dimensions) == ("emb", 256, None)
        assert await typed.embed(["first", "second"]) == [[0.6, 0.8], [0.0, 1.0]]
    assert seen == [("/v1/embeddings", {"model": "", "input": ["first", "second"],
                                         "encoding_format": "float"})]
    assert embedder.prompt_tokens == 7


async def test_embedder_for_an_ollama_model_uses_api_embed() -> None:
    config = GatewayConfig.model_validate({
        "models": {"nomic": {"backend": "ollama", "base_urls": ["http://ollama"],
                             "upstream_model": "nomic-embed-text"}},
        "knowledge": {"embedding_model": "nomic", "embedding_dimensions": 2}})
    seen: list[tuple[str, dict[str, Any]]] = []
    answer = {"embeddings": [[1.0, 1.0]], "prompt_eval_count": 3}
    async with httpx.AsyncClient(transport=_transport(seen, answer)) as client:
        backend = OllamaBackend(client, ["http://ollama"], "nomic-embed-text")
        embedder = embedder_for(config, backend)
        assert embedder is not None
        assert await embedder.embed(["hello"]) == [unit([1.0, 1.0])]
    assert seen == [("/api/embed", {"model": "nomic-embed-text", "input": ["hello"], "dimensions": 2})]
