"""Anthropic's MCP connector (``mcp_servers``) on /v1/messages, with the ``anthropic`` SDK's
beta client: a real MCP server (``tests/support/mcp_server.py``, its own process on loopback)
under the operator's ``[tools.mcp] allowed_urls``; the call and its result come back as
``mcp_tool_use`` / ``mcp_tool_result`` blocks (streamed and not), a URL the operator does not
allow is a 400 naming ``mcp_servers[i]``, and the blocks sent back are re-rendered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.anthropic_sdk import clients
from tests.support.gateway import MODEL, allowing_mcp
from tests.support.mcp_server import running
from tests.support.switch_model import Switch, answer, call

pytestmark = pytest.mark.timeout(120)
ASK: Any = [{"role": "user", "content": "What is 19+23?"}]
BETA: Any = ["mcp-client-2025-04-04"]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running("streamable") as url:
        yield url


def servers(url: str, **extra: Any) -> Any:
    return [{"type": "url", "url": url + "/mcp", "name": "tools", **extra}]


def adding() -> Switch:
    return Switch(call("add", {"a": 19, "b": 23}), ("<|message|>42<|end|>", answer("The sum is 42.")))


async def test_a_call_comes_back_as_mcp_blocks(server: str) -> None:
    model = adding()
    async with clients(model.transport(), allowing_mcp(server)) as c:
        msg = await c.sdk.beta.messages.create(model=MODEL, max_tokens=1000, messages=ASK, betas=BETA,
                                               mcp_servers=servers(server))
        async with c.sdk.beta.messages.stream(model=MODEL, max_tokens=1000, messages=ASK, betas=BETA,
                                              mcp_servers=servers(server)) as stream:
            streamed = await stream.get_final_message()
        # sent back on the next turn, the call and its result are what the model reads again
        history: Any = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                for b in msg.content]},
                        {"role": "user", "content": "And doubled?"}]
        model.rules = (("And doubled?", answer("84.")), *model.rules)
        again = await c.sdk.beta.messages.create(model=MODEL, max_tokens=1000, messages=history, betas=BETA,
                                                 mcp_servers=servers(server))
    for m in (msg, streamed):
        kinds = [b.type for b in m.content]
        assert kinds == ["thinking", "mcp_tool_use", "mcp_tool_result", "text"], kinds
        use, result, text = m.content[1], m.content[2], m.content[3]
        assert use.type == "mcp_tool_use" and use.name == "add" and use.server_name == "tools"
        assert use.input == {"a": 19, "b": 23}
        assert result.type == "mcp_tool_result" and result.tool_use_id == use.id and not result.is_error
        assert not isinstance(result.content, str) and result.content[0].text == "42"
        assert text.type == "text" and text.text == "The sum is 42."
        assert m.stop_reason == "end_turn"
    assert again.content[-1].type == "text" and again.content[-1].text == "84."
    assert "to=tools.add" in model.prompts[-1] and "<|message|>42<|end|>" in model.prompts[-1]


async def test_allowed_tools_limit_what_the_model_sees(server: str) -> None:
    model = Switch(answer("No tools needed."))
    async with clients(model.transport(), allowing_mcp(server)) as c:
        await c.sdk.beta.messages.create(model=MODEL, max_tokens=100, messages=ASK, betas=BETA,
                                         mcp_servers=servers(server, tool_configuration={
                                             "allowed_tools": ["echo"]}))
    assert "echo" in model.prompts[0] and "type add" not in model.prompts[0]


async def test_a_url_the_operator_does_not_allow_is_a_400_naming_the_server(server: str) -> None:
    model = adding()
    async with clients(model.transport(), allowing_mcp()) as c:
        r = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 100, "messages": ASK,
            "mcp_servers": [{"type": "url", "url": "http://unused.example/mcp", "name": "off",
                             "tool_configuration": {"enabled": False}}, *servers(server)]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and "mcp_servers[1]" in error["message"]
    assert model.prompts == []


@pytest.mark.parametrize("approval", ["always", "never"])
async def test_an_operator_server_and_its_approval_policy(server: str, approval: str) -> None:
    """A server the operator configured by name runs without the URL being allowed; one whose
    calls the operator requires approval for is a 400 (the Messages API has no approval step)."""
    c0 = allowing_mcp()
    mcp = c0.tools.mcp.model_validate({**c0.tools.mcp.model_dump(), "servers": {
        "tools": {"url": server + "/mcp", "require_approval": approval}}})
    cfg = c0.model_copy(update={"tools": c0.tools.model_copy(update={"mcp": mcp})})
    model = adding()
    async with clients(model.transport(), cfg) as c:
        r = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 1000, "messages": ASK, "mcp_servers": servers(server)})
    if approval == "always":
        assert r.status_code == 400, r.text
        assert "tools.add" in r.json()["error"]["message"] and model.prompts == []
    else:
        assert r.status_code == 200, r.text
        assert [b["type"] for b in r.json()["content"]][1:3] == ["mcp_tool_use", "mcp_tool_result"]
