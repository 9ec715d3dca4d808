"""/v1/responses in-process against replayed / synthesized llama.cpp streams.

Every body and every streamed event is validated against the Open Responses OpenAPI
document, and every stream goes through the order validator in
tests/support/openresponses.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config, gateway
from tests.support.openresponses import check_stream, validate_error_body, validate_response
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.wire import Replay

REASONING = ("<|channel|>analysis<|message|>The user greets me; reply politely.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Hi there, friend!<|return|>")
PREAMBLE_CALL = ("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>"
                 'commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>')
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
OTHER = {"type": "function", "name": "get_time", "description": "Time.", "parameters": {"type": "object"}}


def _sse(text: str) -> tuple[list[dict[str, Any]], list[str], bool]:
    events: list[dict[str, Any]] = []
    names: list[str] = []
    done = False
    for block in text.split("\n\n"):
        lines = block.split("\n")
        data = "\n".join(x[6:] for x in lines if x.startswith("data: "))
        if not data:
            continue
        if data == "[DONE]":
            done = True
            continue
        names += [x[7:] for x in lines if x.startswith("event: ")]
        events.append(httpx.Response(200, content=data).json())
    return events, names, done


async def _create(client: httpx.AsyncClient, **body: Any) -> tuple[int, Any]:
    r = await client.post("/v1/responses", json={"model": MODEL, **body})
    if body.get("stream") and r.status_code == 200:
        events, names, done = _sse(r.text)
        assert done, "stream must end with [DONE]"
        return r.status_code, (check_stream(events, names), events)
    return r.status_code, r.json()


def _prompt_text(upstream: Any, n: int = -1) -> str:
    return harmony_encoding().decode(upstream.requests[n]["prompt"])


async def test_text_non_streaming() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        status, body = await _create(c, input="Say hello.", metadata={"k": "v"}, service_tier="flex")
    assert status == 200
    validate_response(body)
    assert body["status"] == "completed" and body["object"] == "response"
    (msg,) = body["output"]
    assert msg["type"] == "message" and msg["phase"] == "final_answer" and msg["status"] == "completed"
    assert msg["content"][0]["text"] == "Hello from a scripted tiny model!"
    assert body["usage"]["input_tokens"] == 59 and body["usage"]["output_tokens"] == 11
    assert (body["metadata"], body["service_tier"]) == ({"k": "v"}, "flex")


async def test_reasoning_stream_equals_stored_resource() -> None:
    async with gateway(FakeLlamaCpp(REASONING).transport()) as c:
        status, (final, events) = await _create(c, input="hi", stream=True, reasoning={"effort": "high"})
        assert status == 200
        stored = (await c.get(f"/v1/responses/{final['id']}")).json()
    assert final["status"] == "completed" and stored == final
    reasoning, message = final["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user greets me; reply politely."}]
    assert message["content"][0]["text"] == "Hi there, friend!"
    assert "reply politely" not in str(message)
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0
    assert final["reasoning"]["effort"] == "high"
    assert [e["type"] for e in events][:2] == ["response.created", "response.in_progress"]


async def test_preamble_and_function_call_stream() -> None:
    async with gateway(FakeLlamaCpp(PREAMBLE_CALL).transport()) as c:
        _, (final, _) = await _create(c, input="Weather?", tools=[WEATHER], stream=True)
    preamble, call = final["output"]
    assert preamble["phase"] == "commentary" and preamble["content"][0]["text"] == "Let me check."
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["arguments"] == '{"city":"Paris"}' and call["call_id"].startswith("call_")


async def test_tool_round_trip_and_multi_turn_via_previous_response_id() -> None:
    tool = Replay("10b_toolmodel_completion_tokenids_stream")
    async with gateway(tool.transport()) as c:
        status, first = await _create(c, input="Weather in Paris?", tools=[WEATHER])
        assert status == 200
        (call,) = first["output"]
        r = await c.post("/v1/responses", json={
            "model": MODEL, "previous_response_id": first["id"], "tools": [WEATHER],
            "input": [{"type": "function_call_output", "call_id": call["call_id"],
                       "output": '{"temp_c": 21}'}]})
        assert r.status_code == 200
        second = r.json()
        items = (await c.get(f"/v1/responses/{second['id']}/input_items")).json()
    validate_response(second)
    prompt = _prompt_text(tool)
    assert "<|start|>user<|message|>Weather in Paris?<|end|>" in prompt
    assert ('<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json'
            '<|message|>{"city":"Paris"}<|call|>') in prompt
    assert ('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>'
            '{"temp_c": 21}<|end|>') in prompt
    assert second["previous_response_id"] == first["id"]
    assert [i["type"] for i in items["data"]] == ["message", "function_call", "function_call_output"]


async def test_multi_turn_text() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        _, first = await _create(c, input="Say hello.", instructions="Be brief.")
        _, second = await _create(c, input="Again!", previous_response_id=first["id"])
    prompt = _prompt_text(replay)
    assert ("<|start|>user<|message|>Say hello.<|end|><|start|>assistant<|channel|>final<|message|>"
            "Hello from a scripted tiny model!<|end|><|start|>user<|message|>Again!<|end|>") in prompt
    assert "Be brief." not in prompt  # instructions do not carry over to the next response
    assert "Be brief." in _prompt_text(replay, 0)
    assert second["status"] == "completed"


@pytest.mark.parametrize("stream", [False, True])
async def test_allowed_tools_is_a_hard_constraint(stream: bool) -> None:
    tool = Replay("10b_toolmodel_completion_tokenids_stream")
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]}
    async with gateway(tool.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "Weather?", "stream": stream,
                                                "tools": [WEATHER, OTHER], "tool_choice": choice})
    assert "type get_weather" in _prompt_text(tool)  # every tool stays visible to the model
    if not stream:
        assert r.status_code == 502 and r.headers["x-should-retry"] == "false"
        validate_error_body(r.json())
        assert r.json()["error"]["code"] == "tool_not_allowed"
        return
    events, names, _ = _sse(r.text)
    final = check_stream(events, names)
    assert final["status"] == "failed" and final["error"]["code"] == "tool_not_allowed"
    assert not any(i["type"] == "function_call" for i in final["output"])
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]


@pytest.mark.parametrize("stream", [False, True])
async def test_max_output_tokens_gives_incomplete(stream: bool) -> None:
    replay = Replay("04d_completion_tokenids_stream_n_predict3")
    async with gateway(replay.transport()) as c:
        _, got = await _create(c, input="hi", max_output_tokens=16, stream=stream)
    final = got[0] if stream else got
    if not stream:
        validate_response(final)
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert replay.requests[0]["n_predict"] == 16


async def test_store_false_get_delete_and_unknown_ids() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        _, unstored = await _create(c, input="hi", store=False)
        r = await c.get(f"/v1/responses/{unstored['id']}")
        assert r.status_code == 404
        validate_error_body(r.json())
        _, stored = await _create(c, input="hi")
        assert (await c.get(f"/v1/responses/{stored['id']}")).status_code == 200
        r = await c.delete(f"/v1/responses/{stored['id']}")
        assert r.json() == {"id": stored["id"], "object": "response.deleted", "deleted": True}
        for method, path in [("GET", f"/v1/responses/{stored['id']}"),
                             ("DELETE", "/v1/responses/resp_x"),
                             ("GET", "/v1/responses/resp_x/input_items"),
                             ("POST", "/v1/responses/resp_x/cancel")]:
            r = await c.request(method, path)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "previous_response_id": "resp_x"})
        assert r.status_code == 404


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/a.png"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
    ({"input": "x", "tool_choice": {"type": "function", "name": "missing"}, "tools": [WEATHER]},
     "tool_choice.name"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),  # 1 is fine: Codex probes with it
    ({"input": "x", "background": True, "store": False}, "background"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
])
async def test_bad_requests(body: dict[str, Any], param: str) -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 400, r.text
    validate_error_body(r.json())
    assert r.json()["error"]["param"] == param
    assert replay.requests == []


async def test_json_schema_format_reaches_the_prompt() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    # not strict: the recorded answer is not JSON (a strict format would end it with
    # response_format_violation, tests/unit/engine/test_answer_format.py)
    fmt = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": False}
    async with gateway(replay.transport()) as c:
        _, body = await _create(c, input="x", text={"format": fmt})
    validate_response(body)
    assert "# Response Formats\n\n## answer\n\n{\"type\":\"object\"}" in _prompt_text(replay)
    assert body["text"]["format"]["name"] == "answer"


async def test_truncation_disabled_fails_and_auto_drops_oldest_turns() -> None:
    long_turns: list[dict[str, Any]] = []
    for i in range(6):
        long_turns += [{"role": "user", "content": f"question {i} " + "word " * 60},
                       {"role": "assistant", "content": f"answer {i}"}]
    long_turns.append({"role": "user", "content": "latest question"})
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), config(context_window=300)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": long_turns,
                                                "instructions": "Be kind."})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        status, body = await _create(c, input=long_turns, instructions="Be kind.", truncation="auto")
    assert status == 200 and body["truncation"] == "auto"
    assert body["ocm:truncation"]["dropped_messages"] > 0
    prompt = _prompt_text(replay)
    assert "question 0" not in prompt and "latest question" in prompt and "Be kind." in prompt
    # The same with the window coming from the backend (config 8192, llama.cpp slot 300).
    replay = Replay("03a_completion_tokenids_stream")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json={"default_generation_settings": {"n_ctx": 300}})
        return replay(request)

    async with gateway(httpx.MockTransport(handler), config(context_window=8192)) as c:
        status, body = await _create(c, input=long_turns, instructions="Be kind.", truncation="auto")
    assert status == 200 and body["ocm:truncation"]["dropped_messages"] > 0
    assert "question 0" not in _prompt_text(replay)


async def test_stored_response_survives_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "responses.sqlite3")
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), config(store_path=db)) as c:
        _, body = await _create(c, input="hi")
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), config(store_path=db)) as c:
        r = await c.get(f"/v1/responses/{body['id']}")
        assert r.status_code == 200 and r.json() == body
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_background_response_can_be_cancelled() -> None:
    upstream = EndlessUpstream()
    transport = endless_transport(upstream)
    async with gateway(transport) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
        assert r.status_code == 200
        created = r.json()
        validate_response(created)
        assert created["status"] == "queued" and created["background"] is True
        await upstream.five_sent.wait()
        running = (await c.get(f"/v1/responses/{created['id']}")).json()
        assert running["status"] == "in_progress"
        r = await c.post(f"/v1/responses/{created['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        assert upstream.closed_at is not None
        stored = (await c.get(f"/v1/responses/{created['id']}")).json()
        assert stored["status"] == "cancelled"
        assert all(item["status"] in ("completed", "incomplete") for item in stored["output"])
        r = await c.post(f"/v1/responses/{created['id']}/cancel")
        assert r.status_code == 400  # no longer in flight


async def test_reasoning_items_round_trip_and_are_dropped_after_an_answer() -> None:
    fake = FakeLlamaCpp(REASONING)
    async with gateway(fake.transport()) as c:
        _, first = await _create(c, input="hi", temperature=0.3, top_p=0.8)
        _, second = await _create(c, input="and again", previous_response_id=first["id"])
        items = (await c.get(f"/v1/responses/{second['id']}/input_items")).json()["data"]
    assert (fake.requests[0]["temperature"], fake.requests[0]["top_p"]) == (0.3, 0.8)
    assert [i["type"] for i in items] == ["message", "reasoning", "message", "message"]
    prompt = _prompt_text(fake)
    assert "reply politely" not in prompt  # analysis is dropped once a final answer followed it
    assert "<|channel|>final<|message|>Hi there, friend!<|end|>" in prompt


async def test_named_tool_choice_forces_the_call() -> None:
    tool = Replay("10b_toolmodel_completion_tokenids_stream")
    async with gateway(tool.transport()) as c:
        await _create(c, input="x", tools=[WEATHER, OTHER],
                      tool_choice={"type": "function", "name": "get_weather"})
    assert _prompt_text(tool).endswith(
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>")


async def test_streaming_response_cancelled_in_flight() -> None:
    upstream = EndlessUpstream()
    transport = endless_transport(upstream)
    async with gateway(transport) as c:
        task = asyncio.ensure_future(c.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                                    "stream": True}))
        await upstream.five_sent.wait()
        (response_id,) = list(c._transport.app.state.engine.runs)  # type: ignore[attr-defined]
        r = await c.post(f"/v1/responses/{response_id}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        streamed = await asyncio.wait_for(task, timeout=5)
    events, names, done = _sse(streamed.text)
    final = check_stream(events, names)
    assert done and final["status"] == "cancelled" and upstream.closed_at is not None


@pytest.mark.parametrize(("chat", "responses", "code"), [
    ({"tools": [{"type": "function", "function": {"name": "bad name<|end|>"}}]},
     {"tools": [{"type": "function", "name": "bad name<|end|>"}]}, "invalid_function_name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}},
     {"text": {"format": {"type": "json_schema", "name": "a b", "schema": {}}}}, "invalid_function_name"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "call 1<|x|>", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]},
     {"input": [{"type": "function_call", "call_id": "call 1<|x|>", "name": "f", "arguments": "{}"}]},
     "invalid_tool_call_id"),
])
async def test_both_apis_refuse_the_same_names_and_ids_alike(chat: dict[str, Any], responses: dict[str, Any],
                                                          code: str) -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        r1 = await c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "x"}], **chat})
        r2 = await c.post("/v1/responses", json={"model": MODEL, "input": "x", **responses})
    assert (r1.status_code, r1.json()["error"]["code"]) == (400, code), r1.text
    assert (r2.status_code, r2.json()["error"]["code"]) == (400, code), r2.text
    assert replay.requests == []


@pytest.mark.parametrize("field", [{"prompt": {"id": "pmpt_1"}},
                                   {"no_such_thing": 1}])
async def test_fields_the_gateway_does_not_implement_are_refused_by_name(field: dict[str, Any]) -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", **field})
    assert r.status_code == 400, r.text
    validate_error_body(r.json())
    (name,) = field
    assert r.json()["error"]["param"] == name and r.json()["error"]["code"] == "unknown_parameter"
    assert replay.requests == []


async def test_an_image_in_a_tool_output_is_refused_not_dropped() -> None:
    png = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQ"
           "DwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    async with gateway(FakeLlamaCpp(REASONING).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": [
            {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": [
                {"type": "input_text", "text": "here:"}, {"type": "input_image", "image_url": png}]}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "input[1].output[1]"
    validate_error_body(r.json())
