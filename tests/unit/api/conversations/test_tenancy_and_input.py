"""Conversations are the key's that made them (another key gets 404 on every route, and
changes nothing), and every bad input is an OpenAI-style 4xx naming the parameter."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, alice_and_bob, gateway
from tests.support.openresponses import expect_error

ANSWER = "<|channel|>final<|message|>Ok.<|return|>"
ALICE = {"authorization": "Bearer alice"}
BOB = {"authorization": "Bearer bob"}


def _error(r: httpx.Response, status: int, param: str | None, code: str | None = None) -> None:
    assert set(expect_error(r, status, param, code)) == {"message", "type", "param", "code"}


async def test_another_key_gets_404_on_every_route() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), alice_and_bob()) as c:
        r = await c.post("/v1/conversations", headers=ALICE,
                         json={"metadata": {"k": "v"}, "items": [{"role": "user", "content": "secret"}]})
        conv = r.json()["id"]
        item = (await c.get(f"/v1/conversations/{conv}/items", headers=ALICE)).json()["data"][0]["id"]
        base = f"/v1/conversations/{conv}"
        attempts = [
            c.get(base, headers=BOB),
            c.post(base, headers=BOB, json={"metadata": {"k": "bob"}}),
            c.post(f"{base}/items", headers=BOB, json={"items": [{"role": "user", "content": "x"}]}),
            c.get(f"{base}/items", headers=BOB),
            c.get(f"{base}/items/{item}", headers=BOB),
            c.delete(f"{base}/items/{item}", headers=BOB),
            c.delete(base, headers=BOB),
        ]
        for attempt in attempts:
            _error(await attempt, 404, "conversation_id", "not_found")
        r = await c.post("/v1/responses", headers=BOB,
                         json={"model": MODEL, "input": "what was the secret?", "conversation": conv})
        _error(r, 404, "conversation", "conversation_not_found")
        r = await c.post("/v1/responses/input_tokens", headers=BOB,
                         json={"model": MODEL, "input": "x", "conversation": {"id": conv}})
        _error(r, 404, "conversation", "conversation_not_found")
        assert up.requests == []
        # nothing of alice's changed; without a key it is a 401
        assert (await c.get(base, headers=ALICE)).json()["metadata"] == {"k": "v"}
        items = (await c.get(f"{base}/items", headers=ALICE)).json()["data"]
        assert [i["id"] for i in items] == [item]
        assert (await c.get(base)).status_code == 401
        # and bob's own conversation is his alone
        bobs = (await c.post("/v1/conversations", headers=BOB, json={})).json()["id"]
        _error(await c.get(f"/v1/conversations/{bobs}", headers=ALICE), 404, "conversation_id")


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
    ({"metadata": {"k" * 65: "v"}}, "metadata", "invalid_value"),
    ({"metadata": {"k": "v" * 513}}, "metadata", "invalid_value"),
    ({"metadata": {"k": 1}}, "metadata.k", "invalid_value"),
    ({"metadata": ["k", "v"]}, "metadata", "invalid_value"),
    ({"metadata": "x" * 100_000}, "metadata", "invalid_value"),
    ({"items": [{"role": "user", "content": "x"}] * 21}, "items", "invalid_value"),
    ({"items": [{"type": "item_reference", "id": "msg_1"}]}, "items[0]", "invalid_request"),
    ({"items": [{"type": "no_such_item"}]}, "items[0]", None),
    ({"items": [{"role": "user"}]}, "items[0].message.content", "missing_required_parameter"),
    ({"items": "hello"}, "items", "invalid_value"),
    ({"title": "x"}, "title", "unknown_parameter"),
])
async def test_bad_create_bodies(body: dict[str, Any], param: str, code: str | None) -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.post("/v1/conversations", json=body)
        _error(r, 400, r.json()["error"]["param"] if code is None else param, code)
        assert r.json()["error"]["param"] is not None and r.json()["error"]["param"].startswith(param)


async def test_metadata_at_the_limits_is_accepted() -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.post("/v1/conversations", json={"metadata": metadata})
        assert r.status_code == 200 and r.json()["metadata"] == metadata
        conv = r.json()["id"]
        _error(await c.post(f"/v1/conversations/{conv}", json={"metadata": {**metadata, "x": "y"}}),
               400, "metadata")
        _error(await c.post(f"/v1/conversations/{conv}", json={}), 400, "metadata",
               "missing_required_parameter")
        cleared = await c.post(f"/v1/conversations/{conv}", json={"metadata": None})
        assert cleared.status_code == 200 and cleared.json()["metadata"] == {}


async def test_bad_ids_and_bodies_on_every_route() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        conv = (await c.post("/v1/conversations", json={})).json()["id"]
        for bad in ("nope", "resp_123", "conv_", "conv_" + "a" * 10_000, "conv_a%20b", "conv_%C3%A9"):
            for method, suffix, body in (("GET", "", None), ("POST", "", {"metadata": {}}),
                                         ("DELETE", "", None), ("GET", "/items", None),
                                         ("POST", "/items", {"items": [{"role": "user", "content": "x"}]}),
                                         ("GET", "/items/msg_1", None), ("DELETE", "/items/msg_1", None)):
                r = await c.request(method, f"/v1/conversations/{bad}{suffix}", json=body)
                _error(r, 400, "conversation_id", "invalid_value")
        for bad_item in ("msg_nope", "x" * 10_000, "%00", "%C3%A9"):
            _error(await c.get(f"/v1/conversations/{conv}/items/{bad_item}"), 404, "item_id")
            _error(await c.delete(f"/v1/conversations/{conv}/items/{bad_item}"), 404, "item_id")
        _error(await c.get(f"/v1/conversations/{conv}/items/msg%2F1"), 404, None)  # no such URL
        _error(await c.post(f"/v1/conversations/{conv}/items", json={"items": []}), 400, "items")
        _error(await c.post(f"/v1/conversations/{conv}/items", json={}), 400, "items",
               "missing_required_parameter")
        r = await c.post(f"/v1/conversations/{conv}/items", content=b"{not json",
                         headers={"content-type": "application/json"})
        _error(r, 400, None, "invalid_json")
        _error(await c.post("/v1/conversations", json=[1, 2]), 400, None)
        r = await c.post(f"/v1/conversations/{conv}/items?include=nope",
                         json={"items": [{"role": "user", "content": "x"}]})
        _error(r, 400, "include", "invalid_value")
        r = await c.post(f"/v1/conversations/{conv}/items", json={"items": [
            {"role": "user", "content": [{"type": "input_file", "filename": "a.txt", "file_data": "%%%"}]}]})
        assert r.status_code == 400 and r.json()["error"]["param"].startswith("items[0]"), r.text
        # nothing was added by any of these
        assert (await c.get(f"/v1/conversations/{conv}/items")).json()["data"] == []


async def test_an_image_a_response_could_never_send_is_refused_when_stored() -> None:
    """An http(s) image URL stored in a conversation made every later response a 400."""
    image = {"role": "user", "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]}
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.post("/v1/conversations", json={"items": [image]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "items[0].content[0]", r.text
        conv = (await c.post("/v1/conversations", json={})).json()["id"]
        r = await c.post(f"/v1/conversations/{conv}/items", json={"items": [image]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "items[0].content[0]", r.text
        assert (await c.get(f"/v1/conversations/{conv}/items")).json()["data"] == []
