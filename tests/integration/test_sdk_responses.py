"""The official OpenAI SDK's Responses client against the gateway and a REAL llama.cpp server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import ResponseReasoningTextDeltaEvent

from tests.integration.conftest import run_gateway, write_config
from tests.support.openresponses import check_stream, validate_response

pytestmark = pytest.mark.integration

WEATHER: Any = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}
TIME: Any = {"type": "function", "name": "get_time", "description": "Current time.",
             "parameters": {"type": "object", "properties": {}}}


def _client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="not-needed", max_retries=0, timeout=60)


@pytest.fixture
def client(gateway_url: str) -> OpenAI:
    return _client(gateway_url)


def test_text(client: OpenAI) -> None:
    r = client.responses.create(model="scripted-final", input="Say hello.")
    assert r.status == "completed" and r.output_text == "Hello from a scripted tiny model!"
    validate_response(r.model_dump(mode="json", exclude_unset=True))
    assert r.usage is not None and r.usage.output_tokens == 11


def test_reasoning_streamed(client: OpenAI, gateway_url: str) -> None:
    with client.responses.stream(model="scripted-reasoning", input="hi", reasoning={"effort": "low"}) as s:
        events = list(s)
        final = s.get_final_response()
    kinds = [event.type for event in events]
    assert final.output_text == "Hi there, friend!"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    # The SDK is answered in OpenAI's event names, so its typed parser keeps the reasoning
    # (Open Responses' response.reasoning.delta would arrive as an unknown event).
    thinking = [e for e in events if isinstance(e, ResponseReasoningTextDeltaEvent)]
    assert "".join(e.delta for e in thinking) == "The user greets me; reply politely."
    assert "response.reasoning.delta" not in kinds and kinds[-1] == "response.completed"
    # The same request on the wire: every event validated, order checked, final = fold.
    body = {"model": "scripted-reasoning", "input": "hi", "stream": True}
    events, names = [], []
    with httpx.stream("POST", f"{gateway_url}/v1/responses", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                names.append(line[7:])
            elif line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    folded = check_stream(events, names)
    assert folded["output"][0]["content"][0]["text"] == "The user greets me; reply politely."
    assert "reply politely" not in json.dumps(folded["output"][1])


def test_tool_call_round_trip_via_previous_response_id(client: OpenAI) -> None:
    first = client.responses.create(model="scripted-tool", input="Weather in Paris?", tools=[WEATHER])
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    second = client.responses.create(
        model="scripted-tool", previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 21}'}])
    assert second.status == "completed" and second.previous_response_id == first.id
    items = client.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["message", "function_call", "function_call_output"]


def test_multi_turn(client: OpenAI) -> None:
    first = client.responses.create(model="scripted-final", input="Say hello.")
    second = client.responses.create(model="scripted-final", input="Again.", previous_response_id=first.id)
    assert second.output_text == "Hello from a scripted tiny model!"
    assert client.responses.retrieve(second.id).id == second.id


def test_allowed_tools_blocks_an_unlisted_call(client: OpenAI) -> None:
    choice: Any = {"type": "allowed_tools", "mode": "auto",
                   "tools": [{"type": "function", "name": "get_time"}]}
    sent: list[httpx.Request] = []
    client = client.with_options(http_client=httpx.Client(event_hooks={"request": [sent.append]}))
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model="scripted-tool", input="Weather?", tools=[WEATHER, TIME],
                                tool_choice=choice)
    assert info.value.status_code == 502  # the model failed; x-should-retry: false stops the retries
    assert len(sent) == 1
    assert info.value.body["code"] == "tool_not_allowed"  # type: ignore[index]


def test_stored_response_survives_a_gateway_restart(scripted_models: dict[str, str], tmp_path: Path) -> None:
    config = write_config(tmp_path / "gw.toml", scripted_models, tmp_path / "store.sqlite3")
    with run_gateway(config) as gw:
        created = _client(gw.url).responses.create(model="scripted-final", input="Remember me.")
    with run_gateway(config) as gw:
        again = _client(gw.url).responses.retrieve(created.id)
        assert again.output_text == created.output_text and again.status == "completed"
        _client(gw.url).responses.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            _client(gw.url).responses.retrieve(created.id)
