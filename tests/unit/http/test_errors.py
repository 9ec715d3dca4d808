"""Bad input gets an OpenAI-shaped error with the right status, never a 500 or a hang."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.cli.conformance.responses import HEART_PNG
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _assert_error_shape(body: Any) -> dict[str, Any]:
    assert set(body) == {"error"}
    err: dict[str, Any] = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    return err


async def _post_raw(content: bytes | None = None, json: Any = None) -> tuple[int, Any, Replay]:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as client:
        r = await client.post("/v1/chat/completions", content=content, json=json,
                              headers={"content-type": "application/json"})
    return r.status_code, r.json(), replay


@pytest.mark.parametrize(("body", "status", "code", "param"), [
    ({"model": "nope", "messages": USER}, 404, "model_not_found", "model"),
    ({"model": MODEL}, 400, "missing_required_parameter", "messages"),
    ({"model": MODEL, "messages": []}, 400, "invalid_value", "messages"),
    ({"model": MODEL, "messages": USER, "n": 9}, 400, "invalid_value", "n"),
    ({"model": MODEL, "messages": USER, "temperature": 3}, 400, "invalid_value", "temperature"),
    ({"model": MODEL, "messages": USER, "max_tokens": 0}, 400, "invalid_value", "max_tokens"),
    ({"model": MODEL, "messages": USER, "top_logprobs": 2}, 400, "invalid_request", "top_logprobs"),
    ({"model": MODEL, "messages": USER, "logprobs": True, "top_logprobs": 21}, 400, "invalid_value",
     "top_logprobs"),
    ({"model": MODEL, "messages": USER, "stop": ["a", "b", "c", "d", "e"]}, 400, "invalid_request", "stop"),
    ({"model": MODEL, "messages": USER, "tool_choice": "required"}, 400, "invalid_request", "tool_choice"),
    ({"model": MODEL, "messages": USER, "tools": [TOOL],
      "tool_choice": {"type": "function", "function": {"name": "other"}}}, 400, "invalid_request",
     "tool_choice"),
    ({"model": MODEL, "messages": USER, "tools": [
        {"type": "function", "function": {"name": "bad name<|end|>"}}]}, 400, "invalid_function_name",
     "tools[0].function.name"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{HEART_PNG}"}}]}]}, 400,
     "unsupported_content_type", "messages[0].content[0]"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400,
     "invalid_image", "messages[0].content[0]"),
    ({"model": MODEL, "messages": [{"role": "tool", "content": "x", "tool_call_id": "call_1"}]}, 400,
     "invalid_request", "messages[0].tool_call_id"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_value", None),
    ({"model": MODEL, "messages": USER, "logit_bias": {"x1": 5}}, 400, "invalid_request",
     "logit_bias.x1"),
    ({"model": MODEL, "messages": USER, "stream": False, "stream_options": {"include_usage": True}},
     400, "invalid_request", "stream_options"),
])
async def test_invalid_requests(body: dict[str, Any], status: int, code: str, param: str | None) -> None:
    got_status, got, replay = await _post_raw(json=body)
    err = _assert_error_shape(got)
    assert (got_status, err["code"]) == (status, code), err
    if param is not None:
        assert err["param"] == param
    assert err["type"] == "invalid_request_error"
    assert replay.requests == []  # nothing reached the backend


async def test_malformed_json() -> None:
    status, body, _ = await _post_raw(content=b'{"model": "x", "messages": [')
    err = _assert_error_shape(body)
    assert status == 400 and err["code"] == "invalid_json"


async def test_prompt_longer_than_context_window() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), config(context_window=128)) as client:
        r = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "word " * 200}]})
        assert r.status_code == 400
        assert _assert_error_shape(r.json())["code"] == "context_length_exceeded"
        r = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "max_tokens": 100000})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    assert replay.requests == []


async def test_upstream_context_error_maps_to_400() -> None:
    replay = Replay("05a2_error_prompt_longer_than_context_stream")
    async with gateway(replay.transport()) as client:
        r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                             "stream": True})
    assert r.status_code == 400
    assert _assert_error_shape(r.json())["code"] == "context_length_exceeded"


async def test_upstream_500_is_502_before_streaming() -> None:
    replay = Replay("05b_error_malformed_json")
    async with gateway(replay.transport()) as client:
        r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                             "stream": True})
    assert r.status_code == 502 and r.headers["content-type"].startswith("application/json")
    assert _assert_error_shape(r.json())["type"] == "server_error"


async def test_unknown_route_and_method() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as client:
        r = await client.get("/v1/nothing")
        assert r.status_code == 404 and _assert_error_shape(r.json())["code"] == "not_found"
        r = await client.put("/v1/chat/completions")  # GET lists stored completions
        assert r.status_code == 405 and _assert_error_shape(r.json())["code"] == "method_not_allowed"
        assert r.headers["allow"] == "GET, POST"
        # A path that only matches a parameterised route is an unknown URL, not a 405.
        r = await client.post("/v1/responses/nope", json={})
        assert r.status_code == 404 and _assert_error_shape(r.json())["code"] == "not_found"
        assert "POST /v1/responses/nope" in r.json()["error"]["message"]
        r = await client.put("/v1/models/x")
        assert r.status_code == 404 and _assert_error_shape(r.json())["code"] == "not_found"


async def test_models_and_health() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as client:
        r = await client.get("/health")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        r = await client.get("/v1/models")
        data = r.json()
        assert data["object"] == "list" and [m["id"] for m in data["data"]] == [MODEL]
        assert data["data"][0]["object"] == "model"
        r = await client.get(f"/v1/models/{MODEL}")
        assert r.json()["id"] == MODEL
        r = await client.get("/v1/models/missing")
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


async def test_ready_reflects_backend_health() -> None:
    import httpx

    def healthy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "ok"})

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with gateway(httpx.MockTransport(healthy)) as client:
        r = await client.get("/ready")
        assert r.status_code == 200 and r.json() == {"status": "ready", "models": {MODEL: True}}
    async with gateway(httpx.MockTransport(down)) as client:
        r = await client.get("/ready")
        assert r.status_code == 503 and r.json()["models"] == {MODEL: False}
        assert (await client.get("/health")).status_code == 200  # liveness is independent


async def test_upstream_429_passes_retry_after() -> None:
    import httpx

    def limited(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "7"},
                              json={"error": {"message": "slow down", "type": "rate_limit"}})

    async with gateway(httpx.MockTransport(limited)) as client:
        r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert _assert_error_shape(r.json())["type"] == "rate_limit_error"


async def test_a_bug_is_a_500_with_the_request_id_not_a_reset() -> None:
    """Whatever escapes a route before its response started is answered by the outermost
    gateway middleware: an OpenAI error body, the request id, the connection kept."""
    from app.main import create_app

    app = create_app(config(), transport=Replay("03a_completion_tokenids_stream").transport())

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
            r = await c.get("/boom", headers={"x-request-id": "req-123"})
            assert r.status_code == 500 and r.headers["x-request-id"] == "req-123"
            assert _assert_error_shape(r.json())["code"] == "internal_error"
            assert "a bug" not in r.text  # no internals leak
            assert (await c.get("/health")).status_code == 200


async def test_405_lists_every_method_of_the_path() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as client:
        r = await client.put("/v1/responses", json={})
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
