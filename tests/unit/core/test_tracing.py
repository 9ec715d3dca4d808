"""Tracing (app/core/tracing.py): off unless OTEL_* asks, and then one trace per request:
the server span (child of the caller's traceparent) with the GenAI attributes, ``plan``, one
client span per upstream attempt whose traceparent the backend receives, ``store.*`` spans;
no secret in any attribute."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.config import GatewayConfig
from app.core import tracing
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


def test_off_unless_the_environment_asks() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert tracing.configure({}) is False and not tracing.enabled
    with tracing.span("nothing") as s:
        assert s is None
    store = object()
    assert tracing.traced(store, "sqlite") is store


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.configure({}, exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.reset()


async def test_a_request_is_one_trace_with_its_spans(spans: InMemorySpanExporter) -> None:
    replay = Replay("03a_completion_tokenids_stream")
    secret = "sk-trace-secret"
    data = config().model_dump()
    data["auth"] = {"keys": [{"name": "team", "sha256": hashlib.sha256(secret.encode()).hexdigest()}]}
    async with gateway(replay.transport(), GatewayConfig.model_validate(data)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": True},
                         headers={"traceparent": TRACEPARENT, "authorization": f"Bearer {secret}"})
        assert r.status_code == 200
    tracing.flush()
    finished = spans.get_finished_spans()
    by_name = {s.name: s for s in finished}
    server = by_name["POST /v1/responses"]
    assert f"{server.context.trace_id:032x}" == CALLER_TRACE  # continues the caller's trace
    assert all(f"{s.context.trace_id:032x}" == CALLER_TRACE for s in finished)
    attrs = dict(server.attributes or {})
    assert attrs["gen_ai.request.model"] == MODEL and attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["http.response.status_code"] == 200 and attrs["ocm.key"] == "team"
    plan = by_name["plan"]
    upstream = by_name["POST /completion"]
    assert plan.parent is not None and plan.parent.span_id == server.context.span_id
    assert upstream.parent is not None and upstream.parent.span_id == server.context.span_id
    assert dict(upstream.attributes or {})["server.address"] == "llama.test"
    sent = replay.headers[-1]["traceparent"]
    assert sent == f"00-{CALLER_TRACE}-{upstream.context.span_id:016x}-01"  # the backend's parent
    assert any(s.name.startswith("store.") for s in finished)
    for s in finished:
        assert secret not in str(dict(s.attributes or {}))
