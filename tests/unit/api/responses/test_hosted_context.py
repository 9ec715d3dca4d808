"""What the hosted tools need of a response's context, read in one pass
(app/api/responses/hosted_context.py): what it keeps, that a long context is read off the event
loop (once, with the conversation: the tools get the reading, never the items), and the
approval errors it serves, for a short and for a long context."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.api.responses import hosted, service
from app.api.responses.hosted_context import HostedContext
from tests.support.gateway import MODEL, gateway
from tests.support.gateway import allowing_mcp as cfg
from tests.support.switch_model import Switch, answer

Json = dict[str, Any]
SHORT, LONG = 3, service.BIG + 1  # input items: read inline, read in a worker thread


def _turns(n: int) -> list[Json]:
    return [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(n)]


def test_one_pass_keeps_what_the_tools_need_in_context_order() -> None:
    web = {"type": "web_search_call", "id": "ws_1", "ocm:output": "[0] A (https://a.example)"}
    files = {"type": "file_search_call", "id": "fs_1", "ocm:output": "[0] File search results"}
    ask = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "add",
           "arguments": "{}"}
    yes = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    context = [
        {"type": "message", "role": "user", "content": "hi"}, web, files, ask,
        {"type": "mcp_list_tools", "server_label": "s", "tools": []},
        {"type": "mcp_list_tools", "server_label": "down", "error": "unreachable", "tools": []},
        {"type": "mcp_call", "approval_request_id": "mcpr_0"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False},
        {"type": ["not", "a", "string"]}, {"role": "user", "content": "no type"}, yes]
    read = HostedContext.of(context)
    assert read.approvals == ((10, yes),)  # the denial is no approval; positions are the context's
    assert read.requests == {"mcpr_1": ask} and read.ran == {"mcpr_0"}
    assert read.listed == {"s"}  # a listing that failed lists nothing
    assert read.web_calls == (web,) and read.file_calls == (files,)
    assert HostedContext.of([]) == HostedContext()


@pytest.mark.parametrize("n, off_loop", [(SHORT, False), (LONG, True)])
async def test_the_context_is_read_once_with_the_conversation_and_the_tools_get_the_reading(
        n: int, off_loop: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[bool] = []
    given: list[type] = []
    real_of, real_open = HostedContext.of.__func__, hosted.open_hosted  # type: ignore[attr-defined]

    def of(cls: type[HostedContext], context: Any) -> HostedContext:
        reads.append(threading.current_thread() is not threading.main_thread())
        return real_of(cls, context)  # type: ignore[no-any-return]

    async def open_hosted(tools: Any, settings: Any, context: Any, *args: Any, **kw: Any) -> Any:
        given.append(type(context))
        return await real_open(tools, settings, context, *args, **kw)

    monkeypatch.setattr(HostedContext, "of", classmethod(of))
    monkeypatch.setattr(service, "open_hosted", open_hosted)
    async with gateway(Switch(answer("Hi.")).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": _turns(n)})
    assert r.status_code == 200, r.text
    assert reads == [off_loop] and given == [HostedContext]


@pytest.mark.parametrize("n", [SHORT, LONG])
async def test_an_approval_with_no_mcp_tool_to_run_it_is_a_400(n: int) -> None:
    model = Switch(answer("Hi."))
    yes = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    async with gateway(model.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": [*_turns(n), yes]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "tools" and "no mcp tools" in r.json()["error"]["message"]
    assert model.prompts == []


@pytest.mark.parametrize("n", [SHORT, LONG])
async def test_an_approval_of_a_request_the_context_lacks_is_a_400_naming_it(server: str, n: int) -> None:
    model = Switch(answer("Hi."))
    tool = {"type": "mcp", "server_label": "tools", "server_url": server + "/mcp"}
    yes = {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "tools": [tool],
                                                 "input": [*_turns(n), yes]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == f"input[{n}].approval_request_id"
    assert model.prompts == []
