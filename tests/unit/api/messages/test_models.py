"""``GET /v1/models`` in Anthropic's shape (the ``anthropic`` SDK's ``models.list`` /
``models.retrieve``, which send ``anthropic-version``), paging, the key's allow-list, Anthropic's
error envelope there; per-model ``aliases = [...]`` beside ``[aliases]``."""

from __future__ import annotations

import hashlib
from typing import Any

import anthropic
import pytest

from app.config import GatewayConfig
from tests.support.anthropic_sdk import clients
from tests.support.fake_llamacpp import FakeLlamaCpp

FINAL = "<|channel|>final<|message|>Hi.<|return|>"
KEY = "sk-team"


def _config(*, keys: bool = False) -> GatewayConfig:
    model: dict[str, Any] = {"backend": "llamacpp", "base_urls": ["http://llama.test:8080"],
                             "context_window": 4096, "harmony": {"current_date": "2026-11-22"}}
    data: dict[str, Any] = {
        "store": {"path": ":memory:"},
        "models": {"big": {**model, "aliases": ["claude-opus-4-1", "claude-sonnet-4-5"]},
                   "small": {**model, "aliases": ["claude-haiku-4-5"]}, "other": model},
        "aliases": {"claude-3-7-sonnet-latest": "big"}}
    if keys:
        data["auth"] = {"keys": [{"name": "team", "sha256": hashlib.sha256(KEY.encode()).hexdigest(),
                                  "models": ["big"]}]}
    return GatewayConfig.model_validate(data)


async def test_the_sdk_lists_models_and_aliases_in_anthropics_shape() -> None:
    async with clients(FakeLlamaCpp(FINAL).transport(), _config()) as c:
        page = await c.sdk.models.list()
        listed = [m async for m in c.sdk.models.list(limit=2)]  # the SDK follows has_more / last_id
        one = await c.sdk.models.retrieve("claude-haiku-4-5")
        raw = await c.http.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
        openai = await c.http.get("/v1/models")
    ids = ["big", "small", "other", "claude-3-7-sonnet-latest", "claude-opus-4-1",
           "claude-sonnet-4-5", "claude-haiku-4-5"]
    assert [m.id for m in page.data] == ids and [m.id for m in listed] == ids
    assert all(m.type == "model" and m.created_at.year >= 2026 for m in page.data)
    assert {m.id: m.display_name for m in page.data}["claude-opus-4-1"] == "big"
    assert one.id == "claude-haiku-4-5" and one.display_name == "small"
    body = raw.json()
    assert set(body) == {"data", "has_more", "first_id", "last_id"} and body["has_more"] is False
    assert body["first_id"] == "big" and body["last_id"] == "claude-haiku-4-5"
    assert set(body["data"][0]) == {"type", "id", "display_name", "created_at"}
    assert body["data"][0]["created_at"].endswith("Z")
    assert openai.json()["object"] == "list" and [m["id"] for m in openai.json()["data"]] == \
        ["big", "small", "other"]  # without anthropic-version: OpenAI's list, unchanged


async def test_paging_before_and_after() -> None:
    headers = {"anthropic-version": "2023-06-01"}
    async with clients(FakeLlamaCpp(FINAL).transport(), _config()) as c:
        after = (await c.http.get("/v1/models?limit=2&after_id=small", headers=headers)).json()
        before = (await c.http.get("/v1/models?limit=2&before_id=other", headers=headers)).json()
        bad = await c.http.get("/v1/models?limit=0", headers=headers)
        both = await c.http.get("/v1/models?after_id=big&before_id=small", headers=headers)
    assert [m["id"] for m in after["data"]] == ["other", "claude-3-7-sonnet-latest"] and after["has_more"]
    assert [m["id"] for m in before["data"]] == ["big", "small"] and not before["has_more"]
    for r in (bad, both):  # Anthropic's envelope, because the request said anthropic-version
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "invalid_request_error" and r.headers["request-id"]


async def test_a_key_sees_its_models_and_their_aliases_only() -> None:
    async with clients(FakeLlamaCpp(FINAL).transport(), _config(keys=True), api_key=KEY) as c:
        page = await c.sdk.models.list()
        with pytest.raises(anthropic.NotFoundError) as missing:
            await c.sdk.models.retrieve("claude-haiku-4-5")  # an alias of a model it may not use
        msg = await c.sdk.messages.create(model="claude-sonnet-4-5", max_tokens=50,
                                          messages=[{"role": "user", "content": "Hi"}])
        with pytest.raises(anthropic.NotFoundError):
            await c.sdk.messages.create(model="claude-haiku-4-5", max_tokens=50,
                                        messages=[{"role": "user", "content": "Hi"}])
    assert [m.id for m in page.data] == ["big", "claude-3-7-sonnet-latest", "claude-opus-4-1",
                                         "claude-sonnet-4-5"]
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert msg.model == "claude-sonnet-4-5"  # a per-model alias, answered under the name asked for


def test_per_model_aliases_join_the_table_and_conflicts_are_refused() -> None:
    cfg = _config()
    assert cfg.aliases == {"claude-3-7-sonnet-latest": "big", "claude-opus-4-1": "big",
                           "claude-sonnet-4-5": "big", "claude-haiku-4-5": "small"}
    model = {"backend": "llamacpp", "base_urls": ["http://llama.test:8080"]}
    for bad in ({"a": {**model, "aliases": ["x"]}, "b": {**model, "aliases": ["x"]}},
                {"a": {**model, "aliases": ["b"]}, "b": model}):
        with pytest.raises(ValueError, match="alias"):
            GatewayConfig.model_validate({"models": bad})
    with pytest.raises(ValueError, match="names both"):
        GatewayConfig.model_validate({"models": {"a": {**model, "aliases": ["x"]}, "b": model},
                                      "aliases": {"x": "b"}})
