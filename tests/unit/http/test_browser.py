"""Browser-facing HTTP: CORS when origins are configured (preflights pass auth), Swagger UI."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from app.config import GatewayConfig
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

pytestmark = pytest.mark.asyncio
ORIGIN = "https://app.example.com"


def _cfg(**http: object) -> GatewayConfig:
    base = config().model_dump()
    base["http"] = http
    base["auth"] = {"keys": [{"name": "web", "sha256": hashlib.sha256(b"sk-web").hexdigest()}]}
    return GatewayConfig.model_validate(base)


async def test_preflight_from_an_allowed_origin_needs_no_key_and_answers_cors() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), _cfg(cors_origins=[ORIGIN])) as c:
        pre = await c.options("/v1/chat/completions", headers={
            "origin": ORIGIN, "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"})
        other = await c.options("/v1/chat/completions", headers={
            "origin": "https://evil.example", "access-control-request-method": "POST"})
        r = await c.post("/v1/chat/completions", headers={"origin": ORIGIN, "authorization": "Bearer sk-web"},
                         json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-origin" not in other.headers
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()


async def test_without_origins_there_are_no_cors_headers() -> None:
    async with gateway(httpx.MockTransport(lambda _: httpx.Response(404)), _cfg()) as c:
        r = await c.get("/health", headers={"origin": ORIGIN})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("docs", [True, False])
async def test_swagger_ui_is_served_without_a_key_unless_turned_off(docs: bool) -> None:
    async with gateway(httpx.MockTransport(lambda _: httpx.Response(404)), _cfg(docs=docs)) as c:
        page = await c.get("/docs")
        spec = await c.get("/openapi.json")
    assert spec.status_code == 200 and "/v1/chat/completions" in spec.json()["paths"]
    if docs:
        assert page.status_code == 200 and "swagger-ui" in page.text and "/openapi.json" in page.text
    else:
        assert page.status_code == 404
