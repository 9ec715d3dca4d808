"""``POST /v1/responses/compact``: a ``CompactResource`` per the Open Responses document, whose
output (user messages + one sealed compaction item) a later request continues from."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import openai
from hypothesis import given, settings
from hypothesis import strategies as st

from app.formats.harmony.vocab import harmony_encoding
from app.items import compact
from app.items.compact import kept_items
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, alice_and_bob, config, gateway
from tests.support.openresponses import _validate, validate_error_body, validate_response

ANSWER = "<|channel|>final<|message|>On Tuesday.<|return|>"
CALL_ID = "call_1"
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "We agreed to launch on Tuesday and notify support first."},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "SECRET-THOUGHT"}]},
    {"type": "function_call", "call_id": CALL_ID, "name": "lookup", "arguments": "{}"},
    {"type": "function_call_output", "call_id": CALL_ID, "output": "OLD-TOOL-OUTPUT"},
    {"role": "assistant", "content": "Understood. The launch is Tuesday, with support notified beforehand."},
    {"role": "user", "content": "Thanks."},
    {"role": "assistant", "content": "You are welcome."},
]


def _prompt(up: FakeLlamaCpp) -> str:
    return str(harmony_encoding().decode(up.requests[-1]["prompt"]))


async def _compact(c: httpx.AsyncClient, headers: dict[str, str] | None = None,
                   **body: Any) -> httpx.Response:
    return await c.post("/v1/responses/compact", json=body, headers=headers or {})


async def test_compact_resource_validates_and_continues() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        r = await _compact(c, model=MODEL, input=HISTORY, prompt_cache_key="openresponses-compact-test")
        assert r.status_code == 200, r.text
        body = r.json()
        _validate("CompactResource", body)
        assert body["object"] == "response.compaction" and up.requests == []  # no model call
        *users, item = body["output"]
        assert [u["role"] for u in users] == ["user", "user"] and item["type"] == "compaction"
        assert "Tuesday" not in item["encrypted_content"]
        nxt = await c.post("/v1/responses", json={
            "model": MODEL, "input": [*body["output"], {"role": "user", "content": "When is the launch?"}]})
        assert nxt.status_code == 200, nxt.text
        validate_response(nxt.json())
    prompt = _prompt(up)
    assert prompt.count("We agreed to launch on Tuesday") == 1  # not repeated by the visible copy
    assert "Understood. The launch is Tuesday" in prompt and "When is the launch?" in prompt
    assert "SECRET-THOUGHT" not in prompt
    assert "OLD-TOOL-OUTPUT" not in prompt
    assert prompt.index("We agreed") < prompt.index("Understood.") < prompt.index("When is the launch?")


async def test_the_compaction_item_alone_is_enough() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        item = (await _compact(c, model=MODEL, input=HISTORY)).json()["output"][-1]
        r = await c.post("/v1/responses", json={"model": MODEL, "input": [
            {"type": "compaction", "id": item["id"], "encrypted_content": item["encrypted_content"]},
            {"role": "user", "content": "When?"}]})
    assert r.status_code == 200
    assert "We agreed to launch on Tuesday" in _prompt(up)


async def test_compacts_a_stored_chain_and_the_sdk_parses_it() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        first = (await c.post("/v1/responses", json={"model": MODEL, "input": "When do we launch?"})).json()
        sdk = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=c,  # type: ignore[arg-type]
                                 max_retries=0)
        compacted = await sdk.responses.compact(model=MODEL, previous_response_id=first["id"])
    assert compacted.object == "response.compaction" and compacted.output[-1].type == "compaction"
    assert compacted.usage.total_tokens == 0  # no model pass


def test_what_is_kept() -> None:
    latest = [{"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c2", "output": "NEW"}]
    kept = kept_items([*HISTORY, {"role": "user", "content": "again"}, *latest])
    assert [k.get("type", "message") for k in kept] == ["message"] * 5 + ["function_call",
                                                                          "function_call_output"]


async def test_errors() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        item = (await _compact(c, model=MODEL, input=HISTORY)).json()["output"][-1]
        forged = {**item, "encrypted_content": item["encrypted_content"][:-6] + "AAAAAA"}
        cases = [
            (await _compact(c, input=[{"role": "user", "content": "Compact this."}]), 400, "model"),
            (await _compact(c, model="nope", input="x"), 404, "model"),
            (await _compact(c, model=MODEL, previous_response_id="resp_x"), 404, "previous_response_id"),
            (await _compact(c, model=MODEL, input="x", store=True), 400, "store"),
            (await c.post("/v1/responses", json={"model": MODEL, "input": [forged]}), 400,
             "input[0].encrypted_content"),
            (await c.post("/v1/responses", json={"model": MODEL, "input": [
                {"type": "reasoning", "summary": [], "encrypted_content": item["encrypted_content"]}]}), 400,
             "input[0].encrypted_content"),  # a compaction token is not reasoning
        ]
    for r, status, param in cases:
        assert (r.status_code, r.json()["error"]["param"]) == (status, param), r.text
        validate_error_body(r.json())
    assert up.requests == []


async def test_bound_to_the_api_key_that_compacted() -> None:
    key = base64.b64encode(b"q" * 32).decode()
    cfg = alice_and_bob(responses={**config().responses.model_dump(), "encryption_key": key})
    async with gateway(FakeLlamaCpp(ANSWER).transport(), cfg) as c:
        made = await _compact(c, {"authorization": "Bearer alice"}, model=MODEL, input=HISTORY)
        out = made.json()["output"]
        body = {"model": MODEL, "input": [*out, {"role": "user", "content": "When?"}]}
        bob = await c.post("/v1/responses", json=body, headers={"authorization": "Bearer bob"})
        alice = await c.post("/v1/responses", json=body, headers={"authorization": "Bearer alice"})
    assert bob.status_code == 400 and bob.json()["error"]["param"] == "input[2].encrypted_content"
    assert alice.status_code == 200


_ITEM = st.fixed_dictionaries({
    "type": st.sampled_from(["message", "function_call"]),
    "role": st.sampled_from(["user", "assistant"]),
    "content": st.sampled_from(["a", "b", [{"type": "input_text", "text": "a"}]]),
}, optional={"id": st.sampled_from(["m1", "m2", ""])})


@settings(max_examples=300, deadline=None)
@given(st.lists(_ITEM, max_size=8), st.lists(_ITEM, max_size=8))
def test_expand_keeps_what_the_pairwise_rule_keeps(before: list[dict[str, Any]],
                                                   kept: list[dict[str, Any]]) -> None:
    """The hashed, linear expand (6,000 items took 28.8 s pairwise) is the pairwise rule."""
    want = [i for i in before if not any(compact._same_message(i, k) for k in kept)]
    assert compact.expand(before, kept) == want
