"""Open Responses WebSocket mode (``app.api.responses.websocket``) over real sockets.

The gateway runs in a real uvicorn server (the gateway's own HTTP protocol class) on a loopback
port, upstream faked in-process; the client is the ``websockets`` package.  Every streamed
event is checked by the order validator and the spec's event schemas, every error message
against ``WebSocketErrorEvent``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from app.config import GatewayConfig
from app.formats.harmony.vocab import harmony_encoding
from app.http import server as http_server
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config
from tests.support.openresponses import check_stream
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.ws import create, served, turn

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

Json = dict[str, Any]
TEXT = "<|channel|>final<|message|>Hello from a scripted tiny model!<|return|>"
REASONING = ("<|channel|>analysis<|message|>Think first.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Done thinking.<|return|>")
KEY = "sk-websocket-test"


def final_of(events: list[Json]) -> Json:
    response: Json = events[-1]["response"]
    return response


def prompt(upstream: FakeLlamaCpp, n: int = -1) -> str:
    return harmony_encoding().decode(upstream.requests[n]["prompt"])


async def test_one_response_streams_the_sse_events() -> None:
    async with served(FakeLlamaCpp(TEXT).transport()) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(create(input="Say hello."))
        events, error = await turn(ws)
    assert error is None
    assert events[0]["type"] == "response.created" and events[0]["sequence_number"] == 0
    final = final_of(events)
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == "Hello from a scripted tiny model!"


async def test_store_false_chain_continues_on_the_same_socket_only() -> None:
    upstream = FakeLlamaCpp(TEXT)
    async with served(upstream.transport()) as host:
        async with connect(f"ws://{host}/v1/responses") as ws:
            await ws.send(create(store=False, input="Remember the code word: cobalt."))
            first = final_of((await turn(ws))[0])
            await ws.send(create(store=False, previous_response_id=first["id"], input="The code word?"))
            events, error = await turn(ws)
            assert error is None
            second = final_of(events)
            assert second["previous_response_id"] == first["id"] and second["store"] is False
            text = prompt(upstream)
            assert "cobalt" in text and "The code word?" in text
            assert "Hello from a scripted tiny model!" in text
            await ws.send(create(store=False, previous_response_id=second["id"], input="And again?"))
            assert "cobalt" in prompt(upstream) and (await turn(ws))[1] is None
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:  # nothing was stored
            assert (await http.get(f"/v1/responses/{first['id']}")).status_code == 404
        async with connect(f"ws://{host}/v1/responses") as ws:  # another socket: not found
            await ws.send(create(store=False, previous_response_id=second["id"], input="Reconnected?"))
            _, error = await turn(ws)
            assert error is not None and error["status"] == 404
            assert error["error"]["code"] == "previous_response_not_found"
            assert error["error"]["param"] == "previous_response_id"
            await ws.send(create(store=False, input="Start again."))  # the socket stays open
            assert (await turn(ws))[1] is None


async def test_stored_responses_chain_across_sockets() -> None:
    upstream = FakeLlamaCpp(TEXT)
    async with served(upstream.transport()) as host:
        async with connect(f"ws://{host}/v1/responses") as ws:
            await ws.send(create(input="The code word is copper."))
            first = final_of((await turn(ws))[0])
        async with connect(f"ws://{host}/v1/responses") as ws:
            await ws.send(create(previous_response_id=first["id"], input="The code word?"))
            assert (await turn(ws))[1] is None
    assert "copper" in prompt(upstream)


async def test_a_failed_continuation_evicts_the_socket_response() -> None:
    async with served(FakeLlamaCpp(TEXT).transport()) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(create(store=False, input="Remember: ember."))
        first = final_of((await turn(ws))[0])
        await ws.send(create(store=False, previous_response_id=first["id"], input=[
            {"type": "function_call_output", "call_id": "call_missing", "output": "none"}]))
        _, error = await turn(ws)
        assert error is not None and error["status"] == 400 and error["error"]["param"] == "input[0].call_id"
        await ws.send(create(store=False, previous_response_id=first["id"], input="stale?"))
        _, error = await turn(ws)
        assert error is not None and error["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize(("message", "status", "code", "param"), [
    ("{not json", 400, "invalid_json", None),
    ("[1, 2]", 400, "invalid_json", None),
    (json.dumps({"model": MODEL, "input": "hi"}), 400, "missing_required_parameter", "type"),
    (json.dumps({"type": "response.cancel"}), 400, "invalid_value", "type"),
    (create(input="hi", stream=False), 400, "invalid_value", "stream"),
    (create(input="hi", background=False), 400, "unknown_parameter", "background"),
    (create(input="hi", temperature="hot"), 400, "invalid_value", "temperature"),
    (create(input="hi", frobnicate=1), 400, "unknown_parameter", "frobnicate"),
    (create(), 400, "missing_required_parameter", "input"),
    (create(input="hi", model="nope"), 404, "model_not_found", "model"),
    (create(input="x" * 5000), 413, "request_too_large", None),
])
async def test_bad_messages_get_an_error_event_and_the_socket_stays_open(
        message: str, status: int, code: str, param: str | None) -> None:
    cfg = config()
    cfg.limits.max_body_bytes = 4096
    async with served(FakeLlamaCpp(TEXT).transport(), cfg) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(message)
        _, error = await turn(ws)
        assert error is not None, error
        got = (error["status"], error["error"]["code"], error["error"]["param"])
        assert got == (status, code, param), error
        await ws.send(b"\x00binary")
        _, error = await turn(ws)
        assert error is not None and error["status"] == 400
        await ws.send(create(input="Now a good one."))
        assert (await turn(ws))[1] is None


async def test_messages_sent_at_once_are_answered_one_at_a_time_in_order() -> None:
    async with served(FakeLlamaCpp(TEXT).transport()) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        for word in ("one", "two", "three"):
            await ws.send(create(store=False, input=word, metadata={"word": word}))
        words = []
        for _ in range(3):
            events, error = await turn(ws)  # each turn's events are contiguous and complete
            assert error is None
            words.append(final_of(events)["metadata"]["word"])
    assert words == ["one", "two", "three"]


async def test_closing_the_socket_cancels_the_generation_upstream() -> None:
    upstream = EndlessUpstream()
    async with served(endless_transport(upstream)) as host:
        async with connect(f"ws://{host}/v1/responses") as ws:
            await ws.send(create(input="Talk forever."))
            deltas = 0
            while deltas < 5:
                event = json.loads(await asyncio.wait_for(ws.recv(), 10))
                deltas += event["type"] == "response.output_text.delta"
            closed = time.monotonic()
        for _ in range(200):
            if upstream.closed_at is not None:
                break
            await asyncio.sleep(0.01)
        assert upstream.closed_at is not None, "the upstream request was left open"
        assert upstream.closed_at - closed < 1.0
        sent = upstream.sent
        await asyncio.sleep(0.1)
        assert upstream.sent == sent


async def test_a_bad_key_is_refused_before_the_upgrade() -> None:
    cfg = GatewayConfig.model_validate({**config().model_dump(), "auth": {"keys": [
        {"name": "team", "sha256": hashlib.sha256(KEY.encode()).hexdigest()}]}})
    async with served(FakeLlamaCpp(TEXT).transport(), cfg) as host:
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(f"ws://{host}/v1/responses", additional_headers=headers):
                    pass
            assert refused.value.response.status_code == 401
            assert json.loads(refused.value.response.body or b"{}")["error"]["code"] == "invalid_api_key"
        async with connect(f"ws://{host}/v1/responses",
                           additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(create(input="hi"))
            assert (await turn(ws))[1] is None


@pytest.mark.parametrize(("headers", "delta"), [
    ({}, "response.reasoning.delta"),
    ({"ocm-event-dialect": "openai"}, "response.reasoning_text.delta"),
    ({"x-stainless-lang": "python"}, "response.reasoning_text.delta"),
])
async def test_the_upgrade_request_chooses_the_event_dialect(headers: dict[str, str], delta: str) -> None:
    async with served(FakeLlamaCpp(REASONING).transport()) as host, \
            connect(f"ws://{host}/v1/responses", additional_headers=headers) as ws:
        await ws.send(create(input="Think.", reasoning={"effort": "high"}))
        types = []
        while not types or types[-1] != "response.completed":
            types.append(json.loads(await asyncio.wait_for(ws.recv(), 10))["type"])
    assert delta in types


async def test_an_idle_socket_outlives_the_request_head_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "_settings", lambda: (0.2, 1000))
    async with served(FakeLlamaCpp(TEXT).transport()) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        await asyncio.sleep(0.6)
        await ws.send(create(input="Still there?"))
        assert (await turn(ws))[1] is None


async def test_every_message_counts_against_the_rate_limit() -> None:
    cfg = config()
    cfg.limits.requests_per_minute = 2
    async with served(FakeLlamaCpp(TEXT).transport(), cfg) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        for _ in range(2):
            await ws.send(create(input="hi"))
            assert (await turn(ws))[1] is None
        await ws.send(create(input="one too many"))
        _, error = await turn(ws)
        assert error is not None and error["status"] == 429
        assert (error["error"]["type"], error["error"]["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:  # the same budget as HTTP
            r = await http.post("/v1/responses", json={"model": MODEL, "input": "hi"})
            assert r.status_code == 429


async def test_shutdown_ends_the_response_then_closes_as_a_service_restart() -> None:
    """SIGTERM (uvicorn's should_exit): the streaming response ends with error +
    response.failed (server_shutdown), then the socket closes with 1012; upstream is closed."""
    upstream = EndlessUpstream()
    received: list[Json] = []
    async with served(endless_transport(upstream)) as host:
        ws = await connect(f"ws://{host}/v1/responses")
        await ws.send(create(input="Talk forever."))
        await asyncio.wait_for(upstream.five_sent.wait(), 10)
    with pytest.raises(ConnectionClosed):  # the server has stopped (within the test's timeout)
        while True:
            received.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
    assert ws.close_code == 1012 and upstream.closed_at is not None
    types = [e["type"] for e in received]
    assert types[-1] == "response.failed" and types.count("response.failed") == 1, types[-4:]
    assert received[-1]["response"]["error"]["code"] == "server_shutdown"
    check_stream(received)


async def test_a_session_is_one_access_log_line_with_its_key_and_tokens(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="ocm_gateway.access")
    cfg = GatewayConfig.model_validate({**config().model_dump(), "auth": {"keys": [
        {"name": "team", "sha256": hashlib.sha256(KEY.encode()).hexdigest()}]}})
    async with served(FakeLlamaCpp(TEXT).transport(), cfg) as host:
        with pytest.raises(InvalidStatus):
            async with connect(f"ws://{host}/v1/responses"):
                pass
        async with connect(f"ws://{host}/v1/responses", additional_headers={
                "Authorization": f"Bearer {KEY}", "x-request-id": "ws-trace-1"}) as ws:
            assert ws.response.headers["x-request-id"] == "ws-trace-1"
            tokens = 0
            for _ in range(2):
                await ws.send(create(input="hi"))
                events, _ = await turn(ws)
                usage = final_of(events)["usage"]
                tokens += usage["input_tokens"] + usage["output_tokens"]
        for _ in range(100):  # the line is written once the server has closed the session
            lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ocm_gateway.access"]
            if any(line["request_id"] == "ws-trace-1" for line in lines):
                break
            await asyncio.sleep(0.02)
    session = next(line for line in lines if line["request_id"] == "ws-trace-1")
    assert session["method"] == "WEBSOCKET" and session["status"] == 101 and session["key"] == "team"
    assert session["prompt_tokens"] + session["completion_tokens"] == tokens > 0
    refused = [line for line in lines if line["method"] == "WEBSOCKET" and line["status"] == 401]
    assert len(refused) == 1 and refused[0]["key"] is None


CALL = ('<|channel|>commentary to=functions.get_weather <|constrain|>json'
        '<|message|>{"city":"Paris"}<|call|>')
TIME_TOOL = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}


async def test_a_call_of_a_tool_not_offered_ends_the_response_failed_and_the_socket_goes_on() -> None:
    """The model's bad output is not the client's fault: response.failed (a server-side
    error code), never a bare error event after response.created."""
    async with served(FakeLlamaCpp(CALL).transport()) as host, \
            connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(create(input="Weather?", tools=[TIME_TOOL]))
        events, error = await turn(ws)
        assert error is None, error
        final = final_of(events)
        assert final["status"] == "failed" and final["error"]["code"] == "tool_not_allowed"
        assert [e["type"] for e in events].count("response.failed") == 1
        await ws.send(create(input="Weather?", tools=[TIME_TOOL], stream=True))  # as the Agents SDK sends
        events, error = await turn(ws)
        assert error is None and final_of(events)["status"] == "failed"


async def test_a_key_has_a_bounded_number_of_sockets_and_pending_bytes() -> None:
    cfg = config()
    cfg.limits.max_websockets = 2
    cfg.limits.max_body_bytes = 4096
    upstream = EndlessUpstream()
    async with served(endless_transport(upstream), cfg) as host:
        first = await connect(f"ws://{host}/v1/responses")
        second = await connect(f"ws://{host}/v1/responses")
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"ws://{host}/v1/responses")
        assert refused.value.response.status_code == 429
        assert json.loads(refused.value.response.body)["error"]["code"] == "too_many_websockets"
        await second.close()
        third = await connect(f"ws://{host}/v1/responses")  # a closed socket gave its place back
        # While a response streams, waiting messages may hold max_body_bytes in all.
        await first.send(create(input="Talk forever."))
        await asyncio.wait_for(upstream.five_sent.wait(), 10)
        await first.send(create(input="x" * 2500))
        await first.send(create(input="y" * 2500))  # over 4096 bytes waiting: refused
        while True:
            event = json.loads(await asyncio.wait_for(first.recv(), 10))
            if event["type"] == "error" and "sequence_number" not in event:
                break
        assert event["status"] == 429 and event["error"]["code"] == "too_many_pending_requests"
        for ws in (first, third):
            await ws.close()
