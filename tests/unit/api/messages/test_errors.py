"""Errors on /v1/messages paths in Anthropic's envelope and statuses, with a ``request-id``,
wherever they are raised (routes, validation, auth and limits middleware), as the SDK's typed
exceptions; other paths keep the OpenAI shape."""

from __future__ import annotations

import hashlib
from typing import Any

import anthropic
import pytest

from app.config import GatewayConfig
from app.core.errors import anthropic_error
from tests.support.anthropic_sdk import clients
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config

ANSWER = "<|channel|>final<|message|>Hi!<|return|>"
HI: Any = [{"role": "user", "content": "hi"}]
KEY, LIMITED = "sk-anthropic-test", "sk-limited"


def _envelope(r: Any, status: int, type_: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert body["error"]["type"] == type_ and isinstance(body["error"]["message"], str)
    assert r.headers["request-id"] == r.headers["x-request-id"]


@pytest.mark.parametrize(("status", "expected"), [
    (400, (400, "invalid_request_error")), (401, (401, "authentication_error")),
    (403, (403, "permission_error")), (404, (404, "not_found_error")),
    (413, (413, "request_too_large")), (429, (429, "rate_limit_error")),
    (500, (500, "api_error")), (502, (500, "api_error")), (504, (500, "api_error")),
    (503, (529, "overloaded_error")), (408, (408, "invalid_request_error"))])
def test_the_one_mapping(status: int, expected: tuple[int, str]) -> None:
    new_status, body = anthropic_error(status, "m")
    assert (new_status, body["error"]["type"]) == expected
    assert body == {"type": "error", "error": {"type": expected[1], "message": "m"}}


def _auth_cfg(**limits: Any) -> GatewayConfig:
    data = config().model_dump()
    return GatewayConfig.model_validate({**data, "limits": {**data["limits"], **limits}, "auth": {"keys": [
        {"name": "a", "sha256": hashlib.sha256(KEY.encode()).hexdigest()},
        {"name": "b", "sha256": hashlib.sha256(LIMITED.encode()).hexdigest(), "models": ["other"]}]}})


async def test_validation_unknown_model_and_unknown_url() -> None:
    async with clients(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.http.post("/v1/messages", json={"model": MODEL, "messages": HI})  # no max_tokens
        _envelope(r, 400, "invalid_request_error")
        assert "max_tokens" in r.json()["error"]["message"]
        _envelope(await c.http.post("/v1/messages", content=b"{not json",
                                    headers={"content-type": "application/json"}),
                  400, "invalid_request_error")
        _envelope(await c.http.post("/v1/messages", json={"model": MODEL, "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "bogus"}]}]}), 400, "invalid_request_error")
        _envelope(await c.http.post("/v1/messages/nope", json={}), 404, "not_found_error")
        _envelope(await c.http.post("/v1/messages/count_tokens", json={"model": "nope", "messages": HI}),
                  404, "not_found_error")
        with pytest.raises(anthropic.NotFoundError) as missing:
            await c.sdk.messages.create(model="claude-gateway-nope", max_tokens=10, messages=HI)
        assert missing.value.status_code == 404
        with pytest.raises(anthropic.BadRequestError):
            await c.sdk.messages.create(model=MODEL, max_tokens=10, messages=[])
        chat = await c.http.post("/v1/chat/completions", json={"model": "nope", "messages": HI})
        assert chat.status_code == 404 and "type" not in chat.json()  # OpenAI's shape there


async def test_auth_by_x_api_key_or_bearer_and_errors_from_middleware() -> None:
    async with clients(FakeLlamaCpp(ANSWER).transport(), _auth_cfg(), api_key=KEY) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=10, messages=HI)  # x-api-key
        assert msg.content[0].type == "text"
        body = {"model": MODEL, "max_tokens": 10, "messages": HI}
        ok = await c.http.post("/v1/messages", json=body, headers={"authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200
        _envelope(await c.http.post("/v1/messages", json=body), 401, "authentication_error")
        _envelope(await c.http.post("/v1/messages", json=body, headers={"x-api-key": "wrong"}),
                  401, "authentication_error")
        _envelope(await c.http.post("/v1/messages", json=body, headers={"x-api-key": LIMITED}),
                  404, "not_found_error")  # outside the key's allow-list: as if missing
        chat = await c.http.post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
        assert chat.status_code == 401 and chat.json()["error"]["code"] == "invalid_api_key"
    async with clients(FakeLlamaCpp(ANSWER).transport(), _auth_cfg(), api_key="wrong") as c:
        with pytest.raises(anthropic.AuthenticationError):
            await c.sdk.messages.create(model=MODEL, max_tokens=10, messages=HI)


async def test_limits_answer_in_the_envelope() -> None:
    cfg = _auth_cfg(max_body_bytes=2048, requests_per_minute=1)
    async with clients(FakeLlamaCpp(ANSWER).transport(), cfg, api_key=KEY) as c:
        big = [{"role": "user", "content": "x" * 4096}]
        headers = {"x-api-key": KEY}
        _envelope(await c.http.post("/v1/messages", headers=headers,
                                    json={"model": MODEL, "max_tokens": 5, "messages": big}),
                  413, "request_too_large")
        await c.sdk.messages.create(model=MODEL, max_tokens=10, messages=HI)
        with pytest.raises(anthropic.RateLimitError) as limited:
            await c.sdk.messages.create(model=MODEL, max_tokens=10, messages=HI)
        assert limited.value.response.headers.get("retry-after")
