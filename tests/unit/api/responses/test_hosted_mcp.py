"""MCP tools run by the gateway inside one response (issue 27): the agentic loop end to end.

The MCP server is real: ``tests/support/mcp_server.py`` (the ``mcp`` SDK's MCPServer) in its
own process on loopback, over Streamable HTTP and over SSE.  The model is a fake llama.cpp
whose answer depends on its prompt: it calls a tool until the tool's result is in the
prompt, then answers with what it read (the scripted models of the integration tests do the
same through the real llama.cpp).  Every output is checked with the OpenAI SDK's own types.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.formats.harmony.vocab import harmony_encoding
from app.main import create_app
from tests.support.asgi import AsgiPost, eventually
from tests.support.gateway import MODEL, gateway, sse_payloads
from tests.support.gateway import allowing_mcp as cfg
from tests.support.mcp_server import running
from tests.support.switch_model import Switch, answer, call

pytestmark = pytest.mark.asyncio
Json = dict[str, Any]
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def sse_server() -> Iterator[str]:
    with running("sse") as url:
        yield url


def on(url: str) -> Json:
    return {"tools": [mcp(url + "/mcp")]}


def mcp(url: str, **extra: Any) -> Json:
    return {"type": "mcp", "server_label": "tools", "server_url": url, "require_approval": "never", **extra}


async def test_list_call_answer_non_streaming(server: str) -> None:
    model = Switch(call("add", {"a": 19, "b": 23}), ("<|message|>42<|end|>", answer("The sum is 42.")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "What is 19+23?",
                                                 **on(server)})
    assert r.status_code == 200, r.text
    body = Response.model_validate(r.json())
    kinds = [item.type for item in body.output]
    assert kinds == ["mcp_list_tools", "reasoning", "mcp_call", "message"], kinds
    listing, _, mcp_call, message = body.output
    assert listing.type == "mcp_list_tools" and "add" in [t.name for t in listing.tools]
    assert mcp_call.type == "mcp_call"
    assert (mcp_call.name, mcp_call.server_label, json.loads(mcp_call.arguments)) == ("add", "tools",
                                                                                      {"a": 19, "b": 23})
    assert mcp_call.output == "42" and mcp_call.error is None
    assert message.type == "message" and message.content[0].text == "The sum is 42."  # type: ignore[union-attr]
    assert body.status == "completed"
    # two generations; the second saw the call and its output, with the first step's reasoning
    assert len(model.prompts) == 2
    assert "to=tools.add" in model.prompts[1] and "I need add." in model.prompts[1]
    assert body.usage is not None and body.usage.output_tokens > 0
    assert body.usage.input_tokens == 2 * 59  # the fake reports 59 prompt tokens per generation


async def test_streamed_events_are_the_sdks_and_end_once(server: str) -> None:
    model = Switch(call("add", {"a": 2, "b": 3}), ("<|message|>5<|end|>", answer("5.")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", headers={"x-stainless-lang": "python"},  # OpenAI's event names
                         json={"model": MODEL, "input": "2+3?", "stream": True, **on(server)})
    events = [e for e in sse_payloads(r.text) if e != "[DONE]"]
    for e in events:
        EVENTS.validate_python(e)
    types = [e["type"] for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert types.count("response.completed") == 1 and types[-1] == "response.completed"
    for name in ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
                 "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
                 "response.mcp_call_arguments.done", "response.mcp_call.completed"):
        assert name in types, name
    assert types.index("response.mcp_call.completed") < types.index("response.output_text.delta")
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"
            and e["item"]["type"] == "mcp_call"]
    assert done[0]["output"] == "5" and done[0]["status"] == "completed"


async def test_sse_transport(sse_server: str) -> None:
    model = Switch(call("add", {"a": 1, "b": 1}), ("<|message|>2<|end|>", answer("2")))
    async with gateway(model.transport(), cfg(sse_server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "1+1",
                                                 "tools": [mcp(sse_server + "/sse")]})
    assert r.status_code == 200, r.text
    assert [i["output"] for i in r.json()["output"] if i["type"] == "mcp_call"] == ["2"]


async def test_tool_output_with_control_tokens_is_inert(server: str) -> None:
    model = Switch(call("inject", {}), ("PWNED", answer("done")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", **on(server)})
    assert r.status_code == 200, r.text
    enc = harmony_encoding()
    # the tool's control-token text reached the model as ordinary text: the second prompt has
    # the special tokens of the first plus those of one call and its result (3 messages), and
    # none of the output's <|return|> / <|end|> / <|start|>
    specials = [[t for t in ids if enc.is_special_token(t)] for ids in model.ids]
    added = specials[1][len(specials[0]):]
    assert enc.encode("<|return|>", allowed_special="all")[0] not in specials[1]
    # analysis (channel, message, end) + call (start, channel, constrain, message, call) + the
    # result (start, channel, message, end) + the next turn's start
    assert len(added) == 3 + 5 + 4 + 1, [enc.decode([t]) for t in added]
    assert "PWNED<|return|>" in enc.decode(model.ids[1])
    assert r.json()["output"][-1]["content"][0]["text"] == "done"


async def test_a_failing_tool_goes_back_to_the_model(server: str) -> None:
    model = Switch(call("fail", {}), ("Error", answer("It failed.")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", **on(server)})
    assert r.status_code == 200, r.text
    failed = next(i for i in r.json()["output"] if i["type"] == "mcp_call")
    said = "Error executing tool fail"  # the server's words (its SDK hides the exception)
    assert failed["status"] == "failed" and failed["error"] == {
        "type": "mcp_tool_execution_error", "content": [{"type": "text", "text": said}]}
    assert "Error executing tool fail" in model.prompts[1]
    assert r.json()["status"] == "completed"
    Response.model_validate(r.json())


async def test_a_hanging_tool_times_out(server: str) -> None:
    model = Switch(call("sleep", {"seconds": 30}), ("did not answer", answer("Too slow.")))
    async with gateway(model.transport(), cfg(server, call_timeout=0.5)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", **on(server)})
    failed = next(i for i in r.json()["output"] if i["type"] == "mcp_call")
    assert failed["error"] == {"type": "http_error", "code": 504,  # OpenAI's McpToolCallError
                               "message": "The tool 'sleep' did not answer within 0.5 s."}
    Response.model_validate(r.json())


async def test_rounds_are_bounded(server: str) -> None:
    model = Switch(call("add", {"a": 1, "b": 1}))  # calls forever
    async with gateway(model.transport(), cfg(server, max_rounds=3)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "loop", **on(server)})
        capped = await c.post("/v1/responses", json={"model": MODEL, "input": "loop", "max_tool_calls": 1,
                                                      **on(server)})
    body = r.json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_rounds"}
    assert len(model.prompts) == 3 + 2
    assert capped.json()["incomplete_details"] == {"reason": "max_tool_calls"}
    calls = [i for i in capped.json()["output"] if i["type"] == "mcp_call"]
    assert [c["status"] for c in calls] == ["completed", "failed"]


async def test_approval_round_trip(server: str) -> None:
    model = Switch(call("add", {"a": 4, "b": 4}), ("<|message|>8<|end|>", answer("Eight.")))
    tool = mcp(server + "/mcp", require_approval="always")
    async with gateway(model.transport(), cfg(server)) as c:
        first = (await c.post("/v1/responses",
                               json={"model": MODEL, "input": "4+4?", "tools": [tool]})).json()
        request = next(i for i in first["output"] if i["type"] == "mcp_approval_request")
        assert first["status"] == "completed" and len(model.prompts) == 1
        r = await c.post("/v1/responses", json={
            "model": MODEL, "previous_response_id": first["id"], "tools": [tool],
            "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"],
                       "approve": True}]})
    assert r.status_code == 200, r.text
    body = Response.model_validate(r.json())
    kinds = [i.type for i in body.output]
    assert kinds == ["mcp_call", "message"], kinds  # the tools were listed in the first response
    ran = body.output[0]
    assert ran.type == "mcp_call" and ran.output == "8" and ran.approval_request_id == request["id"]


async def test_server_urls_the_operator_did_not_allow_are_refused(server: str) -> None:
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg()) as c:  # nothing allowed: the default
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", **on(server)})
    assert r.status_code == 400 and r.json()["error"]["code"] == "server_url_not_allowed"
    assert model.prompts == []
    async with gateway(model.transport(), cfg("http://127.0.0.1:1/")) as c:  # unreachable: 424
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                 "tools": [mcp("http://127.0.0.1:1/mcp")]})
    assert r.status_code == 424 and r.json()["error"]["code"] == "tool_server_unavailable"


async def test_tool_choice_forces_an_mcp_server(server: str) -> None:
    model = Switch('tools.add <|constrain|>json<|message|>{"a":1,"b":2}<|call|>',
                   ("<|message|>3<|end|>", answer("3")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "1+2", **on(server),
                                                 "tool_choice": {"type": "mcp", "server_label": "tools"}})
        other = await c.post("/v1/responses", json={"model": MODEL, "input": "1+2", **on(server),
                                                     "tool_choice": {"type": "mcp", "server_label": "nope"}})
    assert r.status_code == 200, r.text
    assert model.prompts[0].endswith("<|start|>assistant<|channel|>commentary to=")  # forced
    assert model.prompts[1].endswith("<|start|>assistant")  # then auto
    assert [i["output"] for i in r.json()["output"] if i["type"] == "mcp_call"] == ["3"]
    assert other.status_code == 400 and other.json()["error"]["code"] == "unsupported_tool_choice"


async def test_a_client_that_leaves_cancels_the_running_tool(server: str, tmp_path: Path) -> None:
    """The client disconnects while ``hold`` runs: the loop is cancelled, the MCP SDK sends
    ``notifications/cancelled`` and the server's handler stops (it notes it in a file)."""
    note = tmp_path / "hold.txt"
    model = Switch(call("hold", {"path": str(note)}))
    app = create_app(cfg(server), transport=model.transport())

    def on_send(post: AsgiPost, message: dict[str, Any]) -> None:
        if b"response.mcp_call.in_progress" in message.get("body", b""):
            asyncio.get_running_loop().call_later(0.5, post.gone.set)  # the tool is running by then

    post = AsgiPost("/v1/responses", {"model": MODEL, "input": "hold", "stream": True, **on(server)}, on_send)
    async with app.router.lifespan_context(app):
        task = post.start(app)
        await post.gone.wait()
        assert note.read_text() == "started\n"
        await asyncio.wait_for(task, timeout=5)
        await eventually(lambda: "cancelled" in note.read_text(), seconds=5)
        assert note.read_text() == "started\ncancelled\n"
        await eventually(lambda: not app.state.engine.runs, seconds=2)
        assert not app.state.engine.runs  # the run is over, not waiting for the tool
    assert len(model.prompts) == 1  # nothing was sampled for a client that left


async def test_cancelling_a_background_response_cancels_the_running_tool(server: str, tmp_path: Path) -> None:
    note = tmp_path / "hold.txt"
    model = Switch(call("hold", {"path": str(note)}))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hold", "background": True,
                                                 **on(server)})
        assert r.status_code == 200, r.text
        rid = r.json()["id"]
        await eventually(lambda: note.exists(), seconds=5)
        cancelled = await c.post(f"/v1/responses/{rid}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        await eventually(lambda: "cancelled" in note.read_text(), seconds=5)
        assert note.read_text() == "started\ncancelled\n"
        stored = (await c.get(f"/v1/responses/{rid}")).json()
    assert stored["status"] == "cancelled"
    assert [i["status"] for i in stored["output"] if i["type"] == "mcp_call"] == ["incomplete"]


async def test_a_name_that_resolves_to_loopback_is_refused_unless_the_operator_says_so(server: str) -> None:
    """``localhost`` resolves to 127.0.0.1: allowed as a name, it is still refused (a DNS name
    pointing inside), until ``allow_private_names``; the address written as such is the
    operator's choice."""
    port = httpx.URL(server).port
    named = f"http://localhost:{port}/"
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg(named)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                 "tools": [mcp(f"{named}mcp")]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "server_url_not_allowed"
    assert "127.0.0.1" in r.json()["error"]["message"] or "::1" in r.json()["error"]["message"]
    settings = cfg(named).tools
    allowed = cfg(named).model_copy(update={"tools": settings.model_copy(update={
        "mcp": settings.mcp.model_copy(update={"allow_private_names": True})})})
    async with gateway(model.transport(), allowed) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                 "tools": [mcp(f"{named}mcp")]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
    "http://127.0.0.1.nip.io:{port}/mcp",  # a public-looking name for loopback
    "http://127.0.0.1:{port}@evil.example/mcp",  # user info
    "http://127.0.0.1:{port}/mcp/../../admin",  # dot segments: a client would request /admin
    "http://127.0.0.2:{port}/mcp",  # another loopback address
    "file:///etc/passwd",
    "gopher://127.0.0.1:{port}/",
])
async def test_ssrf_attempts_are_refused(server: str, url: str) -> None:
    port = httpx.URL(server).port
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg(f"{server}/mcp")) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                 "tools": [mcp(url.format(port=port))]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "server_url_not_allowed"


async def test_a_redirect_is_not_followed(server: str) -> None:
    """An allowed URL that answers 307 to another address: the gateway does not follow it (the
    target, a listener that records connections, never hears from it)."""
    hits: list[bytes] = []

    async def target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(await reader.read(100))
        writer.close()

    async def redirector(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:%d/mcp\r\n"
                     b"content-length: 0\r\nconnection: close\r\n\r\n" % target_port)
        await writer.drain()
        writer.close()

    inner = await asyncio.start_server(target, "127.0.0.1", 0)
    target_port = inner.sockets[0].getsockname()[1]
    outer = await asyncio.start_server(redirector, "127.0.0.1", 0)
    outer_url = f"http://127.0.0.1:{outer.sockets[0].getsockname()[1]}"
    try:
        model = Switch(answer("hi"))
        async with gateway(model.transport(), cfg(outer_url)) as c:
            r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                     "tools": [mcp(f"{outer_url}/mcp")]})
        assert r.status_code == 424, r.text
        assert hits == []
    finally:
        inner.close()
        outer.close()
