"""/v1/conversations with the OpenAI SDK as the client, and ``conversation`` on /v1/responses:
the conversation's items are the context before the input, and the response's input and
output items are appended when it completes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway
from tests.support.openresponses import validate_error_body, validate_response
from tests.support.slow_upstream import EndlessUpstream, endless_transport

ANSWER = "<|channel|>final<|message|>Your name is Ada.<|return|>"
THINK = ("<|channel|>analysis<|message|>The user asked for a name.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>Ada.<|return|>")


def _sdk(c: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=c,  # type: ignore[arg-type]
                              max_retries=0)


def _prompt(up: FakeLlamaCpp, n: int = -1) -> str:
    return str(harmony_encoding().decode(up.requests[n]["prompt"]))


async def test_sdk_crud_and_items() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create(metadata={"topic": "names"},
                                              items=[{"role": "user", "content": "My name is Ada."}])
        assert conv.id.startswith("conv_") and conv.object == "conversation"
        assert conv.metadata == {"topic": "names"}
        got = await sdk.conversations.retrieve(conv.id)
        assert got == conv
        updated = await sdk.conversations.update(conv.id, metadata={"topic": "other"})
        assert updated.metadata == {"topic": "other"} and updated.created_at == conv.created_at
        added = await sdk.conversations.items.create(conv.id, items=[
            {"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
        assert [i.type for i in added.data] == ["message", "message"] and added.has_more is False
        assert added.first_id == added.data[0].id and added.last_id == added.data[1].id
        first = added.data[0]
        item = await sdk.conversations.items.retrieve(first.id, conversation_id=conv.id)
        assert item.type == "message" and item.status == "completed"
        assert item.content[0].type == "input_text" and item.content[0].text == "one"
        after_delete = await sdk.conversations.items.delete(first.id, conversation_id=conv.id)
        assert after_delete.id == conv.id and after_delete.object == "conversation"
        texts = [i.content[0].text async for i in sdk.conversations.items.list(conv.id, order="asc")]
        assert texts == ["My name is Ada.", "two"]
        deleted = await sdk.conversations.delete(conv.id)
        assert (deleted.id, deleted.deleted, deleted.object) == (conv.id, True, "conversation.deleted")
        with pytest.raises(openai.NotFoundError) as err:
            await sdk.conversations.retrieve(conv.id)
        assert err.value.body == {"message": f"Conversation with id {conv.id!r} not found.",
                                  "type": "invalid_request_error", "param": "conversation_id",
                                  "code": "not_found"}


async def test_list_pages_in_both_orders() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create(items=[{"role": "user", "content": str(i)} for i in range(20)])
        await sdk.conversations.items.create(conv.id, items=[{"role": "user", "content": str(i)}
                                                             for i in range(20, 25)])
        page = await sdk.conversations.items.list(conv.id, limit=10)  # newest first by default
        assert [i.content[0].text for i in page.data] == [str(i) for i in range(24, 14, -1)]
        assert page.has_more is True
        every = [i.content[0].text async for i in sdk.conversations.items.list(conv.id, limit=7, order="asc")]
        assert every == [str(i) for i in range(25)]
        last = await sdk.conversations.items.list(conv.id, limit=5, order="asc", after=page.data[1].id)
        assert [i.content[0].text for i in last.data] == ["24"] and last.has_more is False
        r = await c.get(f"/v1/conversations/{conv.id}/items", params={"after": "msg_nope"})
        assert r.status_code == 404 and r.json()["error"]["param"] == "after"
        for bad in ({"limit": 0}, {"limit": 101}, {"order": "sideways"}, {"include": "everything"}):
            r = await c.get(f"/v1/conversations/{conv.id}/items", params=bad)
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]["param"] == next(iter(bad))


async def test_response_reads_and_extends_the_conversation() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create(items=[{"role": "user", "content": "My name is Ada."},
                                                     {"role": "assistant", "content": "Hello Ada."}])
        r = await sdk.responses.create(model=MODEL, conversation=conv.id, input="What is my name?")
        assert r.conversation is not None and r.conversation.id == conv.id
        assert r.output_text == "Your name is Ada." and r.previous_response_id is None
        prompt = _prompt(up)
        assert prompt.index("My name is Ada.") < prompt.index("Hello Ada.") < prompt.index("What is my name?")
        items = [i async for i in sdk.conversations.items.list(conv.id, order="asc")]
        assert [(i.type, getattr(i, "role", None)) for i in items] == [
            ("message", "user"), ("message", "assistant"), ("message", "user"), ("message", "assistant")]
        assert items[2].content[0].text == "What is my name?" and items[2].status == "completed"
        assert items[3].id == r.output[0].id and items[3].content[0].text == "Your name is Ada."
        # the object form, streamed, with no new input: the whole conversation is the context
        stream = await sdk.responses.create(model=MODEL, conversation={"id": conv.id}, stream=True, input=[])
        done = [e async for e in stream if e.type == "response.completed"]
        assert done and done[0].response.conversation is not None
        assert done[0].response.conversation.id == conv.id
        assert _prompt(up).count("Your name is Ada.") == 1
        assert len([i async for i in sdk.conversations.items.list(conv.id)]) == 5
        # the stored response echoes it too
        stored = await c.get(f"/v1/responses/{r.id}")
        validate_response(stored.json())
        assert stored.json()["conversation"] == {"id": conv.id}


async def test_reasoning_items_and_include() -> None:
    up = FakeLlamaCpp(THINK)
    async with gateway(up.transport()) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create()
        await sdk.responses.create(model=MODEL, conversation=conv.id, input="Name?",
                                   reasoning={"effort": "high"})
        plain = [i async for i in sdk.conversations.items.list(conv.id, order="asc")]
        assert [i.type for i in plain] == ["message", "reasoning", "message"]
        assert plain[1].encrypted_content is None
        sealed = await sdk.conversations.items.retrieve(plain[1].id, conversation_id=conv.id,
                                                         include=["reasoning.encrypted_content"])
        assert sealed.type == "reasoning" and sealed.encrypted_content
        # a sealed reasoning item added to another conversation is opened into its context
        other = await sdk.conversations.create(items=[
            {"role": "user", "content": "Name?"},
            {"type": "reasoning", "id": sealed.id, "summary": [],
             "encrypted_content": sealed.encrypted_content},
            {"role": "assistant", "content": "Ada."}])
        opened = [i async for i in sdk.conversations.items.list(other.id, order="asc")][1]
        assert opened.type == "reasoning" and opened.encrypted_content is None
        assert opened.content is not None and opened.content[0].text == "The user asked for a name."
        r = await c.post(f"/v1/conversations/{other.id}/items", json={"items": [
            {"type": "reasoning", "summary": [], "encrypted_content": "tampered"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "items[0].encrypted_content"


async def test_failed_response_adds_nothing() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": "boom"})

    async with gateway(httpx.MockTransport(refuse)) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create(items=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.APIStatusError):
            await sdk.responses.create(model=MODEL, conversation=conv.id, input="more")
        assert len([i async for i in sdk.conversations.items.list(conv.id)]) == 1


async def test_concurrent_responses_and_adds_lose_no_items() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create()
        responses = [sdk.responses.create(model=MODEL, conversation=conv.id, input=f"q{i}") for i in range(8)]
        adds = [sdk.conversations.items.create(conv.id, items=[{"role": "user", "content": f"a{i}"},
                                                               {"role": "user", "content": f"b{i}"}])
                for i in range(8)]
        await asyncio.gather(*responses, *adds)
        items = [i async for i in sdk.conversations.items.list(conv.id, order="asc", limit=100)]
    texts = [i.content[0].text for i in items]
    assert len(items) == 8 * 2 + 8 * 2 and len({i.id for i in items}) == len(items)
    assert sorted(t for t in texts if t[0] in "qab") == sorted(
        [f"q{i}" for i in range(8)] + [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])
    for i in range(8):  # one request's items stay in their order
        assert texts.index(f"a{i}") < texts.index(f"b{i}")


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"conversation": "conv_doesnotexist"}, 404, "conversation", "conversation_not_found"),
    ({"conversation": {"id": "conv_doesnotexist"}}, 404, "conversation", "conversation_not_found"),
    ({"conversation": "resp_123"}, 400, "conversation", "invalid_value"),
    ({"conversation": "conv_" + "x" * 500}, 400, "conversation", "invalid_value"),
    ({"conversation": {"id": "conv_x", "extra": 1}}, 400, "conversation", "invalid_value"),
    ({"conversation": 7}, 400, "conversation", "invalid_value"),
    ({"conversation": "conv_x", "previous_response_id": "resp_1"}, 400, "conversation",
     "mutually_exclusive_parameters"),
])
async def test_bad_conversation_on_responses(body: dict[str, Any], status: int, param: str,
                                             code: str) -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", **body})
    assert r.status_code == status, r.text
    validate_error_body(r.json())
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == (param, code)
    assert up.requests == []


async def test_input_tokens_counts_the_conversation() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        sdk = _sdk(c)
        conv = await sdk.conversations.create(items=[{"role": "user", "content": "word " * 200}])
        with_conv = await c.post("/v1/responses/input_tokens",
                                 json={"model": MODEL, "input": "hi", "conversation": conv.id})
        without = await c.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "hi"})
    assert with_conv.status_code == 200, with_conv.text
    assert with_conv.json()["input_tokens"] >= without.json()["input_tokens"] + 200


async def test_background_unstored_and_cancelled_responses() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        conv = (await c.post("/v1/conversations", json={})).json()["id"]
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": conv,
                                                "background": True})
        assert r.status_code == 200 and r.json()["conversation"] == {"id": conv}
        for _ in range(100):
            if (await c.get(f"/v1/responses/{r.json()['id']}")).json()["status"] == "completed":
                break
            await asyncio.sleep(0.02)
        assert len((await c.get(f"/v1/conversations/{conv}/items")).json()["data"]) == 2
        # store: false: the response is not kept, the conversation still is extended
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "again", "conversation": conv,
                                                "store": False})
        assert r.status_code == 200 and (await c.get(f"/v1/responses/{r.json()['id']}")).status_code == 404
        assert len((await c.get(f"/v1/conversations/{conv}/items")).json()["data"]) == 4
        # an item that cannot open a conversation's context is reported as the conversation's
        await c.post(f"/v1/conversations/{conv}/items", json={"items": [
            {"type": "function_call_output", "call_id": "call_orphan", "output": "x"}]})
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": conv})
        assert r.status_code == 400 and r.json()["error"]["param"] == "conversation.call_id"
    upstream = EndlessUpstream()
    async with gateway(endless_transport(upstream)) as c:
        conv = (await c.post("/v1/conversations", json={})).json()["id"]
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": conv,
                                                "background": True})
        await upstream.five_sent.wait()
        cancelled = await c.post(f"/v1/responses/{r.json()['id']}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        assert (await c.get(f"/v1/conversations/{conv}/items")).json()["data"] == []
