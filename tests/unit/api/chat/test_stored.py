"""Stored chat completions (app/api/chat/stored.py): ``store: true``, then read back, listed,
their messages, metadata updated, deleted; only by the key that made them."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletion

from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, alice_and_bob, gateway

pytestmark = pytest.mark.asyncio
ANSWER = "<|channel|>final<|message|>Hello from a scripted tiny model!<|return|>"
ALICE, BOB = {"authorization": "Bearer alice"}, {"authorization": "Bearer bob"}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_stored_completion_reads_back_and_belongs_to_its_key(stream: bool) -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport(), alice_and_bob()) as c:
        r = await c.post("/v1/chat/completions", headers=ALICE, json={
            "model": MODEL, "store": True, "metadata": {"topic": "greeting"}, "stream": stream,
            "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        completion_id = (r.json()["id"] if not stream else
                         next(line for line in r.text.splitlines() if line.startswith("data: {"))
                         .split('"id":"')[1].split('"')[0])
        got = await c.get(f"/v1/chat/completions/{completion_id}", headers=ALICE)
        assert got.status_code == 200, got.text
        body = ChatCompletion.model_validate(got.json())
        assert body.choices[0].message.content == "Hello from a scripted tiny model!"
        assert got.json()["metadata"] == {"topic": "greeting"}
        messages = (await c.get(f"/v1/chat/completions/{completion_id}/messages", headers=ALICE)).json()
        pairs = [(m["role"], m["content"]) for m in messages["data"]]
        assert pairs == [("system", "Be kind."), ("user", "hi")]
        listed = (await c.get("/v1/chat/completions?metadata[topic]=greeting", headers=ALICE)).json()
        assert [x["id"] for x in listed["data"]] == [completion_id] and listed["has_more"] is False
        assert (await c.get("/v1/chat/completions?metadata[topic]=other", headers=ALICE)).json()["data"] == []
        for attempt in (c.get(f"/v1/chat/completions/{completion_id}", headers=BOB),
                        c.get(f"/v1/chat/completions/{completion_id}/messages", headers=BOB),
                        c.post(f"/v1/chat/completions/{completion_id}", headers=BOB, json={"metadata": {}}),
                        c.delete(f"/v1/chat/completions/{completion_id}", headers=BOB)):
            r = await attempt
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
        assert (await c.get("/v1/chat/completions", headers=BOB)).json()["data"] == []
        r = await c.post(f"/v1/chat/completions/{completion_id}", headers=ALICE,
                         json={"metadata": {"a": "b"}})
        assert r.status_code == 200 and r.json()["metadata"] == {"a": "b"}
        r = await c.delete(f"/v1/chat/completions/{completion_id}", headers=ALICE)
        assert r.json() == {"object": "chat.completion.deleted", "id": completion_id, "deleted": True}
        assert (await c.get(f"/v1/chat/completions/{completion_id}", headers=ALICE)).status_code == 404


async def test_without_store_nothing_is_kept_and_n_with_store_is_a_400() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": "hi"}]})
        assert (await c.get(f"/v1/chat/completions/{r.json()['id']}")).status_code == 404
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "store": True, "n": 2, "messages": [
            {"role": "user", "content": "hi"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "store"
