"""Stateless continuation: ``store: false`` + ``include: ["reasoning.encrypted_content"]``.

A reasoning item comes back sealed; sent back as input (content dropped, as OpenAI's SDKs and
agent frameworks do) its chain of thought is in the next prompt.  Altered, foreign-key and
other-tenant tokens are a 400 naming the item.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import httpx
import openai
import pytest

from app.config import GatewayConfig
from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config, gateway
from tests.support.openresponses import check_stream, validate_error_body, validate_response

THINK_CALL = ("<|channel|>analysis<|message|>Need the weather in Paris first.<|end|>"
              "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
              '<|message|>{"city":"Paris"}<|call|>')
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
KEY = base64.b64encode(b"k" * 32).decode()
INCLUDE = ["reasoning.encrypted_content"]


def _cfg(key: str | None = KEY, **extra: Any) -> GatewayConfig:
    data = config().model_dump()
    data["responses"]["encryption_key"] = key
    return GatewayConfig.model_validate({**data, **extra})


def _prompt(up: FakeLlamaCpp) -> str:
    return str(harmony_encoding().decode(up.requests[-1]["prompt"]))


async def _first_turn(c: httpx.AsyncClient, **headers: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    r = await c.post("/v1/responses", headers=headers, json={
        "model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER], "store": False,
        "include": INCLUDE})
    assert r.status_code == 200, r.text
    body = r.json()
    validate_response(body)
    reasoning, call = body["output"]
    # as agent frameworks replay it: the sealed content only, no plaintext
    replay = [{"role": "user", "content": "Weather in Paris?"},
              {"type": "reasoning", "id": reasoning["id"], "summary": [],
               "encrypted_content": reasoning["encrypted_content"]},
              {"type": "function_call", "call_id": call["call_id"], "name": call["name"],
               "arguments": call["arguments"]},
              {"type": "function_call_output", "call_id": call["call_id"], "output": "18C, sunny"}]
    return reasoning, replay


async def test_reasoning_survives_without_server_state() -> None:
    up = FakeLlamaCpp(THINK_CALL)
    async with gateway(up.transport(), _cfg()) as c:
        reasoning, replay = await _first_turn(c)
        assert reasoning["encrypted_content"].startswith("ocm1.")
        assert "Paris" not in reasoning["encrypted_content"]
        assert (await c.get(f"/v1/responses/{reasoning['id']}")).status_code == 404  # nothing stored
        r = await c.post("/v1/responses", json={"model": MODEL, "input": replay, "tools": [WEATHER],
                                                "store": False})
        assert r.status_code == 200, r.text
    assert "<|channel|>analysis<|message|>Need the weather in Paris first.<|end|>" in _prompt(up)


async def test_without_the_sealed_content_the_reasoning_is_lost() -> None:
    """The control for the test above: what was missing before (no encrypted_content)."""
    up = FakeLlamaCpp(THINK_CALL)
    async with gateway(up.transport(), _cfg()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "Weather in Paris?",
                                                "tools": [WEATHER], "store": False})
        assert "encrypted_content" not in r.json()["output"][0]


async def test_streamed_item_done_carries_it_and_the_sdk_parses_it() -> None:
    up = FakeLlamaCpp(THINK_CALL)
    async with gateway(up.transport(), _cfg()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "Weather?", "tools": [WEATHER],
                                                "store": False, "include": INCLUDE, "stream": True})
        events = [httpx.Response(200, content=block.split("data: ", 1)[1]).json()
                  for block in r.text.split("\n\n") if "data: {" in block]
        final = check_stream(events)
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        assert done[0]["encrypted_content"] == final["output"][0]["encrypted_content"]
        sdk = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=c,  # type: ignore[arg-type]
                                 max_retries=0)
        parsed = await sdk.responses.create(model=MODEL, input="Weather?", tools=[WEATHER],  # type: ignore[list-item]
                                            store=False, include=["reasoning.encrypted_content"])
        assert parsed.output[0].type == "reasoning" and parsed.output[0].encrypted_content


@pytest.mark.parametrize("damage", ["flip", "truncate", "other_key", "ephemeral"])
async def test_tampered_or_foreign_content_is_a_400_naming_the_item(damage: str) -> None:
    up = FakeLlamaCpp(THINK_CALL)
    async with gateway(up.transport(), _cfg()) as c:
        _, replay = await _first_turn(c)
    token = replay[1]["encrypted_content"]
    replay[1]["encrypted_content"] = {"flip": token[:20] + ("A" if token[20] != "A" else "B") + token[21:],
                                      "truncate": token[:40]}.get(damage, token)
    key = base64.b64encode(b"z" * 32).decode() if damage == "other_key" else None
    async with gateway(up.transport(), _cfg(key) if damage in ("other_key", "ephemeral") else _cfg()) as c:
        n = len(up.requests)
        r = await c.post("/v1/responses", json={"model": MODEL, "input": replay, "tools": [WEATHER]})
    assert r.status_code == 400 and len(up.requests) == n
    validate_error_body(r.json())
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("input[1].encrypted_content", "invalid_encrypted_content")


async def test_one_tenant_cannot_replay_another_tenants_reasoning() -> None:
    keys = [{"name": name, "sha256": hashlib.sha256(name.encode()).hexdigest()} for name in ("alice", "bob")]
    up = FakeLlamaCpp(THINK_CALL)
    async with gateway(up.transport(), _cfg(auth={"keys": keys})) as c:
        _, replay = await _first_turn(c, authorization="Bearer alice")
        body = {"model": MODEL, "input": replay, "tools": [WEATHER], "store": False}
        stolen = await c.post("/v1/responses", json=body, headers={"authorization": "Bearer bob"})
        own = await c.post("/v1/responses", json=body, headers={"authorization": "Bearer alice"})
    assert stolen.status_code == 400 and stolen.json()["error"]["param"] == "input[1].encrypted_content"
    assert own.status_code == 200


async def test_a_stored_chain_keeps_the_opened_reasoning() -> None:
    """Opened once: a previous_response_id chain needs neither the token nor the key again."""
    up = FakeLlamaCpp(THINK_CALL)
    async with gateway(up.transport(), _cfg()) as c:
        _, replay = await _first_turn(c)
        first = await c.post("/v1/responses", json={"model": MODEL, "input": replay, "tools": [WEATHER]})
        items = (await c.get(f"/v1/responses/{first.json()['id']}/input_items")).json()["data"]
        assert items[1]["content"] == [{"type": "reasoning_text", "text": "Need the weather in Paris first."}]
