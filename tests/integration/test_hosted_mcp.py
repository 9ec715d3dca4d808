"""Hosted MCP tools through the real stack: the OpenAI SDK → ``ocm-gateway serve`` → a real
llama.cpp server, with the MCP servers real too: ``tests/support/mcp_server.py`` (the ``mcp``
SDK's MCPServer) and ``@modelcontextprotocol/server-everything`` from npm (a server nobody
here wrote; installed by ``scripts/test.sh``).

The model is a scripted gpt-oss model (:mod:`tests.support.scripted_gguf`) with two turns: it
calls ``srv.echo`` (or ``everything.echo``: both servers have an ``echo`` tool) and, once the
call is in its prompt (the marker is the rarest token of the call's argument), answers.  So
one response runs list → call → answer inside the gateway, and its usage is two generations'.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.mcp_server import everything, running
from tests.support.openresponses import check_stream, validate_response
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODEL = "gpt-oss-mcp"
WORDS = "quixotic axolotl"
ANSWER = "The tool echoed it back."
EVERYTHING_MODEL = "gpt-oss-everything"


def _script(label: str) -> str:
    return (f'<|channel|>commentary to={label}.echo <|constrain|>json<|message|>{{"message":"{WORDS}"}}'
            f"<|call|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with running("streamable") as ours, running("sse") as ours_sse, everything() as theirs:
        yield {"ours": f"{ours}/mcp", "ours-sse": f"{ours_sse}/sse", "everything": f"{theirs}/mcp"}


@pytest.fixture(scope="module")
def gateway(servers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("mcp-gateway")
    # an SSE server POSTs to the /messages/ endpoint it names: a /sse prefix does not cover it
    messages = servers["ours-sse"].removesuffix("/sse") + "/messages/"
    allowed = ", ".join(f'"{u}"' for u in (servers["ours"], servers["ours-sse"], messages))
    with llama_server(scripted_model("mcp-echo", _script("srv"))) as url, \
            llama_server(scripted_model("mcp-everything", _script("everything"))) as url2:
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[upstream]", "read_timeout = 60.0", "", "[store]", f'path = "{tmp / "store.sqlite3"}"', "",
            "[tools.mcp]", f"allowed_urls = [{allowed}]", "",
            # The third-party server is configured by the operator under a label of its own;
            # requests name it by label only (its URL is never theirs to choose).
            "[tools.mcp.servers.everything]", f'url = "{servers["everything"]}"',
            'require_approval = "never"', "",
            *(line for name, at in ((MODEL, url), (EVERYTHING_MODEL, url2)) for line in (
                f'[models."{name}"]', 'backend = "llamacpp"', f'base_urls = ["{at}"]',
                "context_window = 4096",
                f'[models."{name}".harmony]', 'current_date = "2026-11-26"', ""))]))
        with run_gateway(config) as running_gateway:
            yield running_gateway


def _client(gw: Running) -> OpenAI:
    return OpenAI(base_url=f"{gw.url}/v1", api_key="not-needed", max_retries=0, timeout=90)


def _ours(url: str, approval: str = "never") -> Any:
    return {"type": "mcp", "server_label": "srv", "server_url": url, "require_approval": approval,
            "allowed_tools": ["echo", "add"]}


def _count(gw: Running, tools: list[Any]) -> int:
    """The first step's prompt size, by the gateway's own counter."""
    r = httpx.post(f"{gw.url}/v1/responses/input_tokens", timeout=30,
                   json={"model": MODEL, "input": "Echo it.", "tools": tools})
    assert r.status_code == 200, r.text
    return int(r.json()["input_tokens"])


@pytest.mark.parametrize("which", ["ours", "ours-sse"])
def test_list_call_answer_in_one_response(gateway: Running, servers: dict[str, str], which: str) -> None:
    tools = [_ours(servers[which])]
    r = _client(gateway).responses.create(model=MODEL, input="Echo it.", tools=tools)
    validate_response(r.model_dump(mode="json", exclude_unset=True))
    assert r.status == "completed" and r.output_text == ANSWER
    assert [i.type for i in r.output] == ["mcp_list_tools", "mcp_call", "message"]
    listed, called = r.output[0], r.output[1]
    assert listed.type == "mcp_list_tools" and sorted(t.name for t in listed.tools) == ["add", "echo"]
    assert called.type == "mcp_call" and called.name == "echo" and called.server_label == "srv"
    assert called.output == f"Echo: {WORDS}" and called.error is None
    # Usage is both generations': two prompts (the second one longer) and both outputs.
    assert r.usage is not None and r.usage.input_tokens > 2 * _count(gateway, tools)
    assert r.usage.output_tokens > 20


def test_streamed_against_server_everything(gateway: Running) -> None:
    tools: Any = [{"type": "mcp", "server_label": "everything", "allowed_tools": ["echo"]}]
    with _client(gateway).responses.stream(model=EVERYTHING_MODEL, input="Echo it.", tools=tools) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert final.output_text == ANSWER and kinds[-1] == "response.completed"
    assert [i.type for i in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    call = final.output[1]
    assert call.type == "mcp_call" and call.output == f"Echo: {WORDS}"  # server-everything's own text
    for name in ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
                 "response.mcp_call.in_progress", "response.mcp_call_arguments.done",
                 "response.mcp_call.completed"):
        assert name in kinds, kinds
    assert kinds.index("response.mcp_call.completed") < kinds.index("response.output_text.delta")
    # The same request on the wire, every event validated against the Open Responses document.
    body = {"model": EVERYTHING_MODEL, "input": "Echo it.", "tools": tools, "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/responses", json=body, timeout=90) as r:
        assert r.status_code == 200
        payloads = [json.loads(line[6:]) for line in r.iter_lines()
                    if line.startswith("data: ") and line != "data: [DONE]"]
    final = check_stream(payloads)
    assert [i["type"] for i in final["output"]] == ["mcp_list_tools", "mcp_call", "message"]


def test_approval_round_trip(gateway: Running, servers: dict[str, str]) -> None:
    client = _client(gateway)
    tools = [_ours(servers["ours"], approval="always")]
    first = client.responses.create(model=MODEL, input="Echo it.", tools=tools)
    assert first.status == "completed"
    assert [i.type for i in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert request.type == "mcp_approval_request" and request.name == "echo"
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=tools,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}])
    validate_response(second.model_dump(mode="json", exclude_unset=True))
    # The list is not repeated (it is in the context); the approved call runs, then the answer.
    assert [i.type for i in second.output] == ["mcp_call", "message"]
    call = second.output[0]
    assert call.type == "mcp_call" and call.approval_request_id == request.id
    assert call.output == f"Echo: {WORDS}" and second.output_text == ANSWER


def test_the_rest_of_the_matrix_fastmcp_streamed_everything_not_and_a_streamed_approval(
        gateway: Running, servers: dict[str, str]) -> None:
    client = _client(gateway)
    with client.responses.stream(model=MODEL, input="Echo it.", tools=[_ours(servers["ours"])]) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert [i.type for i in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output_text == ANSWER and kinds.count("response.completed") == 1
    everything: Any = [{"type": "mcp", "server_label": "everything", "allowed_tools": ["echo"]}]
    plain = client.responses.create(model=EVERYTHING_MODEL, input="Echo it.", tools=everything)
    validate_response(plain.model_dump(mode="json", exclude_unset=True))
    assert [i.type for i in plain.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert plain.output[1].type == "mcp_call" and plain.output[1].output == f"Echo: {WORDS}"
    tools = [_ours(servers["ours"], approval="always")]
    with client.responses.stream(model=MODEL, input="Echo it.", tools=tools) as stream:
        list(stream)
        first = stream.get_final_response()
    request = first.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "echo"
    with client.responses.stream(model=MODEL, previous_response_id=first.id, tools=tools, input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}]) as stream:
        list(stream)
        second = stream.get_final_response()
    assert [i.type for i in second.output] == ["mcp_call", "message"] and second.output_text == ANSWER


def test_a_server_url_the_operator_did_not_allow_is_refused(gateway: Running, servers: dict[str, str],
                                                            tmp_path: Path) -> None:
    for url in (servers["everything"], "http://169.254.169.254/latest/meta-data/", "http://[::1]:9/mcp"):
        tool = {"type": "mcp", "server_label": "other", "server_url": url}
        r = httpx.post(f"{gateway.url}/v1/responses", timeout=30,
                       json={"model": MODEL, "input": "hi", "tools": [tool]})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "server_url_not_allowed"


async def test_agents_sdk_hosted_mcp_tool(gateway: Running, servers: dict[str, str]) -> None:
    """The OpenAI Agents SDK's ``HostedMCPTool``: the gateway runs the server; the SDK sees
    the MCP items and the answer (tracing off: it would export to api.openai.com)."""
    from agents import Agent, HostedMCPTool, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="not-needed", max_retries=0, timeout=90)
    tool = HostedMCPTool(tool_config={"type": "mcp", "server_label": "srv", "server_url": servers["ours"],
                                      "require_approval": "never", "allowed_tools": ["echo"]})
    agent = Agent(name="assistant", model=OpenAIResponsesModel(MODEL, client), tools=[tool])
    result = await Runner.run(agent, "Echo it.", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == ANSWER
    raw = [item.raw_item for item in result.new_items]
    kinds = [getattr(r, "type", None) for r in raw]
    assert "mcp_list_tools" in kinds and "mcp_call" in kinds, kinds
    call = next(r for r in raw if getattr(r, "type", None) == "mcp_call")
    assert getattr(call, "output", None) == f"Echo: {WORDS}"
