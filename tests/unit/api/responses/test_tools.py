"""Every Responses tool type (``app/api/responses/tools.py``): Codex's recorded first request,
namespace and custom tools round trip, the hosted-tool policy.

``tests/fixtures/codex/first_request.json`` is the request the real Codex CLI 0.169.0 (npm
``@openai/codex``, ``wire_api = "responses"``, ``codex exec "say hi"``) sent to a capture
server on loopback, headers included.  Outputs are validated with the OpenAI SDK's own
types: the Open Responses document has no ``custom_tool_call`` or namespaces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.responses import (
    Response,
    ResponseCustomToolCallInputDeltaEvent,
    ResponseCustomToolCallInputDoneEvent,
    ResponseOutputItemDoneEvent,
)

from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config, gateway
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.asyncio
Json = dict[str, Any]
CODEX = json.loads((Path(FIXTURES) / "codex" / "first_request.json").read_text())
TEXT = "<|channel|>final<|message|>hi<|return|>"
SPAWN = ('<|channel|>commentary to=multi_agent_v1.spawn_agent <|constrain|>json'
         '<|message|>{"message":"go"}<|call|>')
PATCH = ('<|channel|>commentary to=functions.apply_patch <|constrain|>json'
         '<|message|>{"input":"*** Begin Patch\\n*** End Patch"}<|call|>')
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch.",
               "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'}}


def _prompt(upstream: FakeLlamaCpp, n: int = -1) -> str:
    return harmony_encoding().decode(upstream.requests[n]["prompt"])


def _sse(text: str) -> list[Json]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


async def test_codex_first_request_is_answered() -> None:
    body = {**CODEX["body"], "model": MODEL}
    headers = {k: v for k, v in CODEX["headers"].items() if k.lower() not in ("host", "content-length")}
    upstream = FakeLlamaCpp(TEXT)
    async with gateway(upstream.transport(), config(context_window=32768)) as c:
        r = await c.post("/v1/responses", json=body, headers=headers)
    assert r.status_code == 200, r.text
    events = _sse(r.text)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    Response.model_validate(final)
    prompt = _prompt(upstream)
    assert "namespace multi_agent_v1 {" in prompt and "type spawn_agent = " in prompt  # Harmony's own
    assert "exec_command" in prompt
    assert "web_search" not in prompt  # the hosted tool is not shown to the model ...
    assert final["ocm:tools_not_run"] == ["web_search"]  # ... and the response says so
    assert [t["type"] for t in final["tools"]] == [t["type"] for t in body["tools"]]
    namespace = next(t for t in final["tools"] if t["type"] == "namespace")
    assert namespace["name"] == "multi_agent_v1" and all(t["type"] == "function" for t in namespace["tools"])


@pytest.mark.parametrize("stream", [False, True])
async def test_a_namespace_call_comes_back_with_namespace_and_name(stream: bool) -> None:
    tools = [t for t in CODEX["body"]["tools"] if t["type"] == "namespace"]
    upstream = FakeLlamaCpp(SPAWN)
    async with gateway(upstream.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "tools": tools,
                                                "stream": stream})
        assert r.status_code == 200, r.text
        final = _sse(r.text)[-1]["response"] if stream else r.json()
        call = final["output"][-1]
        assert (call["type"], call["namespace"], call["name"]) == ("function_call", "multi_agent_v1",
                                                                   "spawn_agent")
        Response.model_validate(final)
        # The next turn sends the call back as OpenAI returns it, with its output.
        r = await c.post("/v1/responses", json={"model": MODEL, "tools": tools, "input": [
            {"role": "user", "content": "go"}, call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "spawned"}]})
        assert r.status_code == 200, r.text
    assert "to=multi_agent_v1.spawn_agent" in _prompt(upstream)
    assert "multi_agent_v1.spawn_agent to=assistant" in _prompt(upstream)


async def test_a_custom_tool_call_is_freeform_input() -> None:
    upstream = FakeLlamaCpp(PATCH)
    async with gateway(upstream.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "patch it", "stream": True,
                                                "tools": [APPLY_PATCH]})
        events = _sse(r.text)
        types = [e["type"] for e in events]
        assert types.count("response.custom_tool_call_input.done") == 1
        delta = ResponseCustomToolCallInputDeltaEvent.model_validate(
            next(e for e in events if e["type"] == "response.custom_tool_call_input.delta"))
        done = ResponseCustomToolCallInputDoneEvent.model_validate(
            next(e for e in events if e["type"] == "response.custom_tool_call_input.done"))
        assert delta.delta == done.input == "*** Begin Patch\n*** End Patch"
        item = ResponseOutputItemDoneEvent.model_validate(
            next(e for e in events if e["type"] == "response.output_item.done")).item
        assert item.type == "custom_tool_call" and item.input == done.input and item.name == "apply_patch"
        final = events[-1]["response"]
        Response.model_validate(final)
        assert "Lark grammar" in _prompt(upstream)  # the model is told the grammar
        call = final["output"][-1]
        r = await c.post("/v1/responses", json={"model": MODEL, "tools": [APPLY_PATCH], "input": [
            {"role": "user", "content": "patch it"}, call,
            {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Done!"}]})
        assert r.status_code == 200, r.text
    prompt = _prompt(upstream)
    assert '{"input": "*** Begin Patch\\n*** End Patch"}' in prompt and "Done!" in prompt


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"tool_choice": {"type": "web_search"}, "tools": [{"type": "web_search"}]}, "tool_choice.type",
     "unsupported_tool_choice"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]},
      "tools": [{"type": "web_search"}]}, "tool_choice.tools", "unsupported_tool_choice"),
    ({"tool_choice": {"type": "custom", "name": "nope"}, "tools": [APPLY_PATCH]}, "tool_choice.name",
     "invalid_request"),
    ({"tools": [{"type": "function", "name": "multi__x"},
                {"type": "namespace", "name": "multi", "tools": [{"type": "function", "name": "x"}]}]},
     "tools[1].tools[0].name", "invalid_request"),
    ({"tools": [{"type": "teleport"}]}, "tools[0]", "invalid_value"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt", "unknown_parameter"),
])
async def test_what_cannot_be_honoured_is_a_400_naming_it(body: Json, param: str, code: str) -> None:
    async with gateway(FakeLlamaCpp(TEXT).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", **body})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == (param, code), r.text


async def test_every_hosted_type_is_accepted_and_reported() -> None:
    # mcp (test_hosted_mcp.py) and file_search (test_hosted_file_search.py) are run by the
    # gateway: not in this list any more
    hosted = ["web_search", "web_search_preview", "code_interpreter",
              "image_generation", "computer_use_preview", "local_shell", "shell", "apply_patch",
              "tool_search"]
    async with gateway(FakeLlamaCpp(TEXT).transport()) as c:
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": "hi", "tools": [{"type": t} for t in hosted],
            "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "web_search"}]}})
        bare_mcp = await c.post("/v1/responses",
                                json={"model": MODEL, "input": "hi", "tools": [{"type": "mcp"}]})
    assert r.status_code == 200, r.text
    assert r.json()["ocm:tools_not_run"] == hosted
    assert bare_mcp.status_code == 400 and bare_mcp.json()["error"]["param"] == "tools[0].mcp.server_label"


async def test_fields_openai_accepts_are_accepted() -> None:
    async with gateway(FakeLlamaCpp(TEXT).transport()) as c:
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": [], "max_output_tokens": 1, "store": None, "prompt": None,
            "background": None, "stream": None, "truncation": None, "service_tier": None,
            "client_metadata": {"x-codex-installation-id": "abc"}, "prompt_cache_retention": "24h",
            "prompt_cache_key": "k", "safety_identifier": "u1", "user": "u1"})
    assert r.status_code == 200, r.text
    assert r.json()["store"] is True and r.json()["background"] is False


async def test_the_fixture_is_what_codex_sent() -> None:
    assert CODEX["headers"]["originator"] == "codex_exec"
    assert {"type": "web_search", "external_web_access": False} in CODEX["body"]["tools"]
    assert isinstance(httpx.Headers(CODEX["headers"]).get("user-agent"), str)


async def test_a_forced_namespace_member_is_prefilled_with_its_namespace() -> None:
    tools = [t for t in CODEX["body"]["tools"] if t["type"] == "namespace"]
    upstream = FakeLlamaCpp('{"message":"go"}<|call|>')  # the model writes only the arguments
    choice = {"type": "function", "namespace": "multi_agent_v1", "name": "spawn_agent"}
    async with gateway(upstream.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "tools": tools,
                                                "tool_choice": choice})
    assert r.status_code == 200, r.text
    call = r.json()["output"][-1]
    assert (call["namespace"], call["name"], call["arguments"]) == ("multi_agent_v1", "spawn_agent",
                                                                    '{"message":"go"}')
    assert _prompt(upstream).endswith("to=multi_agent_v1.spawn_agent <|constrain|>json<|message|>")


async def test_a_flattened_call_of_a_namespace_member_still_comes_back_split() -> None:
    tools = [t for t in CODEX["body"]["tools"] if t["type"] == "namespace"]
    flat = ('<|channel|>commentary to=functions.multi_agent_v1__spawn_agent <|constrain|>json'
            '<|message|>{"message":"go"}<|call|>')
    async with gateway(FakeLlamaCpp(flat).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "tools": tools})
    call = r.json()["output"][-1]
    assert (call["namespace"], call["name"]) == ("multi_agent_v1", "spawn_agent")
