"""A model of ``kind = "embedding"`` (app/engine/registry.py): every API that generates refuses
it with a 400 ``model_not_supported`` naming ``model``, in its own envelope, before any request
reaches a backend; it still embeds, is listed and can be retrieved; a chat model keeps both."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.config import GatewayConfig, load_config
from app.core.errors import InvalidRequest
from app.engine.registry import Registry
from tests.support.gateway import MODEL, gateway

EMB = "minilm"
EMBEDDING = {"object": "list", "model": "x", "usage": {"prompt_tokens": 4, "total_tokens": 4},
             "data": [{"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}]}
HI = [{"role": "user", "content": "hi"}]


def two_models(**embedding: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({"store": {"path": ":memory:"}, "models": {
        MODEL: {"backend": "llamacpp", "base_urls": ["http://chat.test:8080"]},
        EMB: {"backend": "llamacpp", "base_urls": ["http://emb.test:8080"], "kind": "embedding",
              "context_window": 512, **embedding}}})


class Recorder:
    """Every request that reaches a backend (any method, any host); ``/v1/embeddings``
    answered by the hosts in ``embeds``, a 404 elsewhere (llama.cpp without --embeddings)."""

    def __init__(self, embeds: tuple[str, ...] = ("emb.test",)) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.embeds = embeds

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.host, request.url.path))
        if request.url.path == "/v1/embeddings" and request.url.host in self.embeds:
            return httpx.Response(200, json=EMBEDDING)
        return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found",
                                                   "type": "not_found_error"}})

    def hosts(self) -> set[str]:
        return {host for _, host, _ in self.seen}


GENERATION = [
    ("/v1/chat/completions", {"messages": HI}),
    ("/v1/chat/completions", {"messages": HI, "stream": True}),
    ("/v1/chat/completions", {"messages": HI, "n": 2}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/responses", {"input": "hi", "stream": True}),
    ("/v1/responses", {"input": "hi", "background": True}),
    ("/v1/responses/input_tokens", {"input": "hi"}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/v1/completions", {"prompt": [1, 2, 3], "stream": True}),
]


@pytest.mark.parametrize(("path", "body"), GENERATION)
async def test_generation_on_an_embedding_model_is_a_400_before_any_backend(
        path: str, body: dict[str, Any]) -> None:
    up = Recorder()
    async with gateway(httpx.MockTransport(up), two_models()) as client:
        r = await client.post(path, json={"model": EMB, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "model_not_supported"
    assert r.json()["error"]["param"] == "model" and EMB in r.json()["error"]["message"]
    assert "emb.test" not in up.hosts() and all(path != p for _, _, p in up.seen)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_the_messages_api_refuses_it_in_anthropics_envelope(path: str) -> None:
    up = Recorder()
    cfg = two_models(aliases=["claude-embed"])  # an alias names the same model
    async with gateway(httpx.MockTransport(up), cfg) as client:
        for model in (EMB, "claude-embed"):
            r = await client.post(path, json={"model": model, "max_tokens": 16, "messages": HI},
                                  headers={"anthropic-version": "2023-06-01"})
            assert r.status_code == 400, r.text
            assert r.json() == {"type": "error", "error": {
                "type": "invalid_request_error", "message": r.json()["error"]["message"]}}
            assert EMB in r.json()["error"]["message"] and "embedding" in r.json()["error"]["message"]
    assert "emb.test" not in up.hosts()


async def test_it_embeds_is_listed_and_retrieved() -> None:
    up = Recorder()
    async with gateway(httpx.MockTransport(up), two_models()) as client:
        r = await client.post("/v1/embeddings", json={"model": EMB, "input": "hello"})
        assert r.status_code == 200 and r.json()["data"][0]["embedding"] == [0.6, 0.8]
        assert ("POST", "emb.test", "/v1/embeddings") in up.seen
        listed = (await client.get("/v1/models")).json()["data"]
        assert sorted(m["id"] for m in listed) == sorted([MODEL, EMB])
        assert (await client.get(f"/v1/models/{EMB}")).status_code == 200
        anthropic = await client.get(f"/v1/models/{EMB}", headers={"anthropic-version": "2023-06-01"})
        assert anthropic.status_code == 200 and anthropic.json()["id"] == EMB
        assert (await client.get("/v1/models/nope")).status_code == 404


async def test_a_chat_model_still_embeds_and_an_unknown_model_is_still_a_404() -> None:
    up = Recorder()
    async with gateway(httpx.MockTransport(up), two_models()) as client:
        # the chat model's llama.cpp has no /v1/embeddings here (404): as before, a 400 naming model
        r = await client.post("/v1/embeddings", json={"model": MODEL, "input": "hello"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_endpoint"
        assert ("POST", "chat.test", "/v1/embeddings") in up.seen
        r = await client.post("/v1/chat/completions", json={"model": "nope", "messages": HI})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    up = Recorder(embeds=("chat.test",))
    async with gateway(httpx.MockTransport(up), two_models()) as client:  # one that does embed
        r = await client.post("/v1/embeddings", json={"model": MODEL, "input": "hello"})
        assert r.status_code == 200 and r.json()["data"][0]["embedding"] == [0.6, 0.8]


def test_kind_defaults_to_chat_and_the_registry_tells_them_apart() -> None:
    cfg = two_models()
    assert cfg.models[MODEL].kind == "chat" and cfg.models[EMB].kind == "embedding"
    registry = Registry(cfg, httpx.AsyncClient(transport=httpx.MockTransport(Recorder())))
    assert registry.route(MODEL) is registry.lookup(MODEL)
    assert registry.lookup(EMB).name == EMB
    with pytest.raises(InvalidRequest) as refused:
        registry.route(EMB)
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "model_not_supported",
                                                                               "model")
    with pytest.raises(ValueError, match="kind"):
        load_config(None, env={"OCMGW_MODEL": "m", "OCMGW_BACKEND_URL": "http://m",
                               "OCMGW__models__m__kind": "rerank"})
