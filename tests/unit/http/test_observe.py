"""Request ids, access logs and Prometheus metrics."""

from __future__ import annotations

import json
import logging
import re

import pytest

from tests.support.gateway import MODEL, gateway
from tests.support.wire import Replay

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


def _value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            got = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if all(got.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in metrics")


async def test_metrics_after_requests(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ocm_gateway.access")
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "trace-42"})
        assert r.headers["x-request-id"] == "trace-42"
        r = await c.post("/v1/chat/completions", json={**CHAT, "stream": True},
                         headers={"x-request-id": "bad id with spaces"})
        assert r.headers["x-request-id"].startswith("req_")
        await c.post("/v1/chat/completions", json={**CHAT, "model": "missing"})
        text = (await c.get("/metrics")).text
    route = "/v1/chat/completions"
    assert _value(text, "ocm_requests_total", route=route, model=MODEL, status="200") == 2
    assert _value(text, "ocm_requests_total", route=route, status="404") == 1
    assert _value(text, "ocm_tokens_total", model=MODEL, direction="out") == 22
    assert _value(text, "ocm_tokens_total", model=MODEL, direction="in") == 118
    assert _value(text, "ocm_time_to_first_token_seconds_count", model=MODEL) == 2
    assert _value(text, "ocm_upstream_seconds_count", model=MODEL) == 2
    assert _value(text, "ocm_gateway_overhead_seconds_count", route=route) == 2
    assert _value(text, "ocm_open_streams") == 0
    logs = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "ocm_gateway.access"]
    first = next(entry for entry in logs if entry["request_id"] == "trace-42")
    assert first["status"] == 200 and first["model"] == MODEL and first["duration_ms"] > 0


async def test_backend_errors_are_counted() -> None:
    async with gateway(Replay("10b_toolmodel_completion_tokenids_stream").transport()) as c:
        r = await c.post("/v1/chat/completions", json=CHAT)  # the model calls an undeclared tool
        assert r.status_code == 502 and r.headers["x-should-retry"] == "false"
        text = (await c.get("/metrics")).text
    assert _value(text, "ocm_backend_errors_total", model=MODEL, code="tool_not_allowed") == 1
    assert _value(text, "ocm_open_streams") == 0


async def test_open_streams_gauge_returns_to_zero_when_closed_unread() -> None:
    from app import metrics as m
    from app.core.conversation import Conversation, GenerationParams, Message, TextPart
    from app.engine.generation import start

    metrics = m.Metrics()
    stats, token = m.begin(metrics)
    try:
        async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
            route = c._transport.app.state.registry.route(MODEL)  # type: ignore[attr-defined]
            stream = await start(route, Conversation((Message("user", (TextPart("hi"),)),)),
                                 GenerationParams())
            assert metrics.open_streams._value.get() == 1
            await stream.aclose()
            assert metrics.open_streams._value.get() == 0
            assert stats.model == MODEL
    finally:
        m.end(token)


async def test_usage_per_key_in_the_log_and_metrics(caplog: pytest.LogCaptureFixture) -> None:
    """An operator can see who used what: the key's configured name (never the key) and its
    token counts, in the access log line and in ocm_key_* metrics."""
    import hashlib

    from app.config import GatewayConfig
    from tests.support.gateway import config

    secret = "sk-carol-secret"
    cfg = GatewayConfig.model_validate({**config().model_dump(), "auth": {"keys": [
        {"name": "carol", "sha256": hashlib.sha256(secret.encode()).hexdigest()}]}})
    caplog.set_level(logging.INFO, logger="ocm_gateway.access")
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), cfg) as c:
        auth = {"authorization": f"Bearer {secret}"}
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=auth)).status_code == 200
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 401
        text = (await c.get("/metrics")).text
    logs = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "ocm_gateway.access"]
    ok = next(e for e in logs if e["status"] == 200)
    assert ok["key"] == "carol" and ok["prompt_tokens"] == 59 and ok["completion_tokens"] == 11
    assert next(e for e in logs if e["status"] == 401)["key"] is None
    assert secret not in caplog.text and secret not in text
    assert _value(text, "ocm_key_tokens_total", key="carol", model=MODEL, direction="in") == 59
    assert _value(text, "ocm_key_tokens_total", key="carol", model=MODEL, direction="out") == 11
    assert _value(text, "ocm_key_requests_total", key="carol", status="200") == 1
    assert _value(text, "ocm_key_requests_total", key="-", status="401") == 1


def test_route_labels_are_bounded() -> None:
    """Ids never become label values (one series per route, not per object)."""
    from app.http.observe import _route

    assert _route({"path": "/v1/conversations/conv_1/items/msg_2"}) == "/v1/conversations/{id}/items"
    assert _route({"path": "/v1/conversations/conv_1"}) == "/v1/conversations/{id}"
    assert _route({"path": "/v1/conversations"}) == "/v1/conversations"
    assert _route({"path": "/v1/responses/resp_1/input_items"}) == "/v1/responses/{id}/input_items"
    assert _route({"path": "/v1/anything/else"}) == "other"


def test_metric_children_cached_per_metric_and_label_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached ``labels()`` children: one per metric and full label set (a key's counts
    never land on another key's or another metric's series), bounded, and what
    ``labels()`` itself returns."""
    from app import metrics as m
    from app.http import observe

    metrics = m.Metrics()
    mw = observe.ObserveMiddleware(lambda *a: None, metrics)  # type: ignore[arg-type, return-value]
    carol = mw._child(metrics.key_requests, "carol", "200")
    assert carol is metrics.key_requests.labels("carol", "200")
    assert mw._child(metrics.key_requests, "carol", "200") is carol
    dave = mw._child(metrics.key_requests, "dave", "200")
    assert dave is not carol and dave is metrics.key_requests.labels("dave", "200")
    assert mw._child(metrics.key_requests, "carol", "429") is not carol
    # the same label values on another metric are another series
    assert mw._child(metrics.key_tokens, "carol", "m", "in") is not mw._child(
        metrics.key_tokens, "carol", "m", "out")
    carol.inc(2)
    dave.inc(5)
    text = __import__("prometheus_client").generate_latest(metrics.registry).decode()
    assert _value(text, "ocm_key_requests_total", key="carol", status="200") == 2
    assert _value(text, "ocm_key_requests_total", key="dave", status="200") == 5
    monkeypatch.setattr(observe, "CHILDREN_CACHED", 3)
    for i in range(10):
        mw._child(metrics.key_requests, f"k{i}", "200").inc()
        assert len(mw._children) <= 3
    assert mw._child(metrics.key_requests, "carol", "200") is carol  # prometheus kept it


async def test_two_keys_alternating_keep_their_own_counts() -> None:
    import hashlib

    from app.config import GatewayConfig
    from tests.support.gateway import config

    keys = {"carol": "sk-carol-secret", "dave": "sk-dave-secret"}
    cfg = GatewayConfig.model_validate({**config().model_dump(), "auth": {"keys": [
        {"name": n, "sha256": hashlib.sha256(s.encode()).hexdigest()} for n, s in keys.items()]}})
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), cfg) as c:
        for name in ("carol", "dave", "carol", "carol", "dave", "carol"):
            r = await c.post("/v1/chat/completions", json=CHAT,
                             headers={"authorization": f"Bearer {keys[name]}"})
            assert r.status_code == 200
        text = (await c.get("/metrics")).text
    assert _value(text, "ocm_key_requests_total", key="carol", status="200") == 4
    assert _value(text, "ocm_key_requests_total", key="dave", status="200") == 2
    assert _value(text, "ocm_key_tokens_total", key="carol", model=MODEL, direction="out") == 44
    assert _value(text, "ocm_key_tokens_total", key="dave", model=MODEL, direction="out") == 22
