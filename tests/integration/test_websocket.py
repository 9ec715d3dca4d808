"""WebSocket mode against the real gateway (``ocm-gateway serve``) on real llama.cpp servers.

The client is the ``websockets`` package over a loopback socket; the models are the scripted
GGUFs of the integration fixtures.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

pytestmark = pytest.mark.integration

Json = dict[str, Any]


def _turn(ws: ClientConnection, **body: Any) -> tuple[list[Json], Json | None]:
    ws.send(json.dumps({"type": "response.create"} | body))
    events: list[Json] = []
    while True:
        event = json.loads(ws.recv(timeout=60))
        if event["type"] == "error" and "sequence_number" not in event:
            return events, event
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return events, None


def _url(gateway_url: str) -> str:
    return gateway_url.replace("http://", "ws://") + "/v1/responses"


def test_a_store_false_chain_over_one_socket(gateway_url: str) -> None:
    with connect(_url(gateway_url)) as ws:
        events, error = _turn(ws, model="scripted-final", store=False, input="Remember: cobalt.")
        assert error is None and events[-1]["type"] == "response.completed", events[-1]
        first = events[-1]["response"]
        assert first["output"][-1]["content"][0]["text"] == "Hello from a scripted tiny model!"
        events, error = _turn(ws, model="scripted-reasoning", store=False,
                              previous_response_id=first["id"], input="The code word?")
        assert error is None and events[-1]["response"]["previous_response_id"] == first["id"]
        assert "response.reasoning.delta" in {e["type"] for e in events}  # the spec's names
        _, error = _turn(ws, model="scripted-final", previous_response_id="resp_nope", input="?")
        assert error is not None and error["status"] == 404
        assert error["error"]["code"] == "previous_response_not_found"
    assert httpx.get(f"{gateway_url}/v1/responses/{first['id']}").status_code == 404  # not stored


def test_closing_mid_response_leaves_the_gateway_serving(gateway_url: str) -> None:
    with connect(_url(gateway_url)) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "scripted-reasoning", "input": "Go."}))
        assert json.loads(ws.recv(timeout=60))["type"] == "response.created"
    with connect(_url(gateway_url), additional_headers={"ocm-event-dialect": "openai"}) as ws:
        events, error = _turn(ws, model="scripted-reasoning", input="Again.")
        assert error is None and events[-1]["type"] == "response.completed"
        assert "response.reasoning_text.delta" in {e["type"] for e in events}
