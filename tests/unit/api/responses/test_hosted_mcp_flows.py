"""MCP flows around the loop (issue 27): approval answered statelessly, denied, per tool and
after a compaction; tools that return huge output or kill their server mid-call; a streamed
failed call; the SSE fallback; names that would collide.  The MCP server is the real one of
``tests/support/mcp_server.py``; the model the prompt-dependent fake of
:mod:`tests.support.switch_model`."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support.gateway import MODEL, gateway, sse_payloads
from tests.support.gateway import allowing_mcp as cfg
from tests.support.mcp_server import running
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.switch_model import Switch, answer, call

Json = dict[str, Any]
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def mcp(url: str, **extra: Any) -> Json:
    return {"type": "mcp", "server_label": "tools", "server_url": url, **extra}


def adding() -> Switch:
    return Switch(call("add", {"a": 4, "b": 4}), ("<|message|>8<|end|>", answer("Eight.")),
                  ("did not approve", answer("Not allowed.")))


async def asked(c: Any, tool: Json) -> tuple[Json, Json]:
    """A first response that ends asking to approve a call: it, and its approval request."""
    first = (await c.post("/v1/responses", json={"model": MODEL, "input": "4+4?", "tools": [tool]})).json()
    return first, next(i for i in first["output"] if i["type"] == "mcp_approval_request")


async def test_approval_answered_statelessly_in_input(server: str) -> None:
    """No ``previous_response_id``, nothing stored: the client sends the transcript back with
    its ``mcp_approval_response``, as the OpenAI SDK does with ``store: false``."""
    model = adding()
    tool = mcp(server + "/mcp", require_approval="always")
    async with gateway(model.transport(), cfg(server)) as c:
        first = (await c.post("/v1/responses", json={"model": MODEL, "input": "4+4?", "tools": [tool],
                                                      "store": False})).json()
        request = next(i for i in first["output"] if i["type"] == "mcp_approval_request")
        r = await c.post("/v1/responses", json={"model": MODEL, "tools": [tool], "store": False, "input": [
            {"role": "user", "content": "4+4?"}, *first["output"],
            {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}]})
    assert r.status_code == 200, r.text
    body = Response.model_validate(r.json())
    assert [i.type for i in body.output] == ["mcp_call", "message"]  # listed already: in the input
    ran = body.output[0]
    assert ran.type == "mcp_call" and ran.output == "8" and ran.approval_request_id == request["id"]


async def test_a_denied_call_is_not_run_and_the_model_is_told(server: str) -> None:
    model = adding()
    tool = mcp(server + "/mcp", require_approval="always")
    async with gateway(model.transport(), cfg(server)) as c:
        first, request = await asked(c, tool)
        r = await c.post("/v1/responses", json={
            "model": MODEL, "previous_response_id": first["id"], "tools": [tool], "input": [
                {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": False}]})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]
    assert r.json()["output"][0]["content"][0]["text"] == "Not allowed."
    assert "The user did not approve this call." in model.prompts[-1]


async def test_approval_per_tool(server: str) -> None:
    """``require_approval: {"never": {"tool_names": ["add"]}}``: add runs at once; a tool it
    does not name still waits for approval."""
    model = Switch(call("add", {"a": 4, "b": 4}), ("<|message|>8<|end|>", call("echo", {"message": "hi"})))
    tool = mcp(server + "/mcp", require_approval={"never": {"tool_names": ["add"]}})
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "tools": [tool]})
    assert r.status_code == 200, r.text
    kinds = [(i["type"], i.get("name")) for i in r.json()["output"] if i["type"] != "reasoning"]
    assert kinds == [("mcp_list_tools", None), ("mcp_call", "add"), ("mcp_approval_request", "echo")]


async def test_a_pending_approval_survives_a_compaction(server: str) -> None:
    model = adding()
    tool = mcp(server + "/mcp", require_approval="always")
    async with gateway(model.transport(), cfg(server)) as c:
        first, request = await asked(c, tool)
        compacted = await c.post("/v1/responses/compact", json={"model": MODEL,
                                                                 "previous_response_id": first["id"]})
        assert compacted.status_code == 200, compacted.text
        r = await c.post("/v1/responses", json={"model": MODEL, "tools": [tool], "input": [
            *compacted.json()["output"],
            {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}]})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["mcp_call", "message"]  # the listing was kept too
    assert r.json()["output"][0]["output"] == "8"


async def test_long_output_is_cut_and_huge_output_is_a_failed_call(server: str) -> None:
    """Past ``max_output_chars`` the text is cut (the model and the item say how much); past
    the MCP client's 1 MiB bound on one message the call fails, and the response goes on."""
    model = Switch(call("long", {"chars": 100_000}), ("byte limit", answer("Too long.")),
                   ("more characters]", call("huge", {})))
    async with gateway(model.transport(), cfg(server, max_output_chars=1000)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                 "tools": [mcp(server + "/mcp", require_approval="never")]})
    assert r.status_code == 200, r.text
    long, huge = [i for i in r.json()["output"] if i["type"] == "mcp_call"]
    assert long["status"] == "completed" and long["output"].startswith("y" * 1000 + "\n")
    assert long["output"].endswith("[output truncated: 99000 more characters]")
    assert huge["status"] == "failed" and huge["error"]["type"] == "mcp_protocol_error"
    assert "exceeded the 1048576 byte limit." in huge["error"]["message"]
    assert r.json()["status"] == "completed" and r.json()["output"][-1]["content"][0]["text"] == "Too long."


async def test_a_server_that_dies_mid_call_fails_the_call_not_the_response() -> None:
    with running("streamable") as own:  # its own server: this one exits
        model = Switch(call("die", {}), ("Error", answer("The server went away.")))
        async with gateway(model.transport(), cfg(own)) as c:
            r = await c.post("/v1/responses", headers={"x-stainless-lang": "python"},  # OpenAI's names
                             json={"model": MODEL, "input": "go", "stream": True,
                                   "tools": [mcp(own + "/mcp", require_approval="never")]})
    events = [e for e in sse_payloads(r.text) if e != "[DONE]"]
    for event in events:
        EVENTS.validate_python(event)
    assert [e["type"] for e in events].count("response.completed") == 1
    final = events[-1]["response"]
    item = next(i for i in final["output"] if i["type"] == "mcp_call")
    # the connection ended: OpenAI's http_error 502 (the SDK's -32000 is its own word for it,
    # not a JSON-RPC error of the server), as the README says
    assert item["status"] == "failed" and item["error"]["type"] == "http_error", item
    assert item["error"]["code"] == 502
    assert item["error"]["message"] == ("The MCP server 'tools' went away during the call "
                                        "(SSE stream ended without a response).")
    assert "response.mcp_call.failed" in [e["type"] for e in events]
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == "The server went away."


async def test_an_older_server_is_reached_over_sse_when_streamable_http_fails() -> None:
    """A URL that does not say ``/sse``: Streamable HTTP is tried first and refused, then SSE."""
    with running("sse") as sse:
        model = Switch(call("add", {"a": 1, "b": 1}), ("<|message|>2<|end|>", answer("2")))
        async with gateway(model.transport(), cfg(sse)) as c:
            r = await c.post("/v1/responses", json={"model": MODEL, "input": "1+1", "tools": [
                mcp(sse + "/sse?v=1", require_approval="never")]})
    assert r.status_code == 200, r.text
    assert [i["output"] for i in r.json()["output"] if i["type"] == "mcp_call"] == ["2"]


async def test_the_deadline_stops_a_generation_that_runs_past_it(server: str) -> None:
    upstream = EndlessUpstream()  # a model that never stops writing
    async with gateway(endless_transport(upstream), cfg(server, deadline_seconds=0.5)) as c:
        t0 = time.monotonic()
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                 "tools": [mcp(server + "/mcp", require_approval="never")]})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "incomplete" and r.json()["incomplete_details"] == {"reason": "deadline"}
    assert time.monotonic() - t0 < 5 and upstream.closed_at is not None  # its request was closed
    assert r.json()["output"][-1]["content"][0]["text"].startswith("Hello")  # what it wrote is kept


async def test_no_generation_after_a_call_that_used_up_the_deadline(server: str) -> None:
    model = Switch(call("sleep", {"seconds": 30}), ("time limit", answer("Should not be sampled.")))
    async with gateway(model.transport(), cfg(server, deadline_seconds=0.5)) as c:
        r = await c.post("/v1/responses", headers={"x-stainless-lang": "python"}, json={
            "model": MODEL, "input": "go", "stream": True,
            "tools": [mcp(server + "/mcp", require_approval="never")]})
    events = [e for e in sse_payloads(r.text) if e != "[DONE]"]
    for event in events[:-1]:  # the last: its reason "deadline" is outside the SDK's enum (see README)
        EVENTS.validate_python(event)
    assert [e["type"] for e in events][-1] == "response.incomplete" and len(model.prompts) == 1
    final = events[-1]["response"]
    assert final["incomplete_details"] == {"reason": "deadline"}
    item = next(i for i in final["output"] if i["type"] == "mcp_call")
    assert item["status"] == "failed" and "time limit" in item["error"]["content"][0]["text"]


async def test_usage_is_summed_and_each_step_is_in_the_access_log(server: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ocm_gateway.access")
    model = Switch(call("add", {"a": 1, "b": 2}), ("<|message|>3<|end|>", answer("3")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "1+2",
                                                 "tools": [mcp(server + "/mcp", require_approval="never")]})
    assert r.status_code == 200, r.text
    [line] = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "ocm_gateway.access"]
    steps = line["steps"]
    assert [s["hosted_calls"] for s in steps] == [1, 0] and all(s["completion_tokens"] > 0 for s in steps)
    usage = r.json()["usage"]
    assert usage["input_tokens"] == sum(s["prompt_tokens"] for s in steps) == line["prompt_tokens"]
    assert usage["output_tokens"] == sum(s["completion_tokens"] for s in steps)


async def test_a_function_named_like_an_mcp_tool_is_a_400(server: str) -> None:
    mine = {"type": "function", "name": "tools__add", "parameters": {"type": "object", "properties": {}}}
    async with gateway(Switch(answer("x")).transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "tools": [
            mcp(server + "/mcp", require_approval="never"), mine]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "tools" and "tools__add" in r.json()["error"]["message"]
