"""Many ``mcp`` tools in one request (issue 35, item 1): 200 tools naming the one allowed URL
made ~1,000 upstream requests and blocked the event loop for seconds.  The tools a request may
offer are capped (a 400 naming ``tools``, before any connection), tools naming one server share
one session and one listing, and no session builds its own TLS context on the loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpcore2
import httpx
import pytest

from app.config import GatewayConfig
from app.tools import egress
from app.tools.mcp import McpServer, McpSession
from tests.support.gateway import MODEL, gateway
from tests.support.gateway import allowing_mcp as cfg
from tests.support.mcp_hostile import running
from tests.support.switch_model import Switch, answer, call

pytestmark = pytest.mark.asyncio
Json = dict[str, Any]


@pytest.fixture(scope="module")
def counting() -> Iterator[str]:
    """An MCP server that counts the requests it hears (``/hits``); its endpoint is ``/private``."""
    with running() as url:
        yield url


def requests_heard(url: str) -> int:
    return int(httpx.get(f"{url}/hits").json().get("/private", 0))


def tool(url: str, label: str, **extra: Any) -> Json:
    return {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never", **extra}


def capped(allowed: str, cap: int) -> GatewayConfig:
    c = cfg(allowed)
    return c.model_copy(update={"tools": c.tools.model_copy(update={
        "mcp": c.tools.mcp.model_copy(update={"max_tools_per_request": cap})})})


async def test_too_many_mcp_tools_are_a_400_before_any_connection(counting: str) -> None:
    url = f"{counting}/private"
    before = requests_heard(counting)
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg(url)) as c:  # the default cap: 20
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                 "tools": [tool(url, f"s{i}") for i in range(200)]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "tools",
                                                              "array_above_max_length")
    assert "at most 20" in error["message"] and "200" in error["message"]
    assert requests_heard(counting) == before and model.prompts == []


async def test_the_cap_is_the_operators(counting: str) -> None:
    url = f"{counting}/private"
    model = Switch(answer("hi"))
    async with gateway(model.transport(), capped(url, 2)) as c:
        two = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                   "tools": [tool(url, "a"), tool(url, "b")]})
        three = await c.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                     "tools": [tool(url, n) for n in "abc"]})
    assert two.status_code == 200, two.text
    assert three.status_code == 400 and three.json()["error"]["param"] == "tools"


async def test_tools_naming_one_server_share_one_session(counting: str) -> None:
    """Twenty labels on one URL cost the server what one does; each label keeps its own
    allowed_tools, approval and listing."""
    url = f"{counting}/private"
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg(url)) as c:
        before = requests_heard(counting)
        one = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [tool(url, "s0")]})
        single = requests_heard(counting) - before
        tools = [tool(url, f"s{i}") for i in range(18)]
        tools += [tool(url, "only_add", allowed_tools=["add"]),
                  tool(url, "asks", allowed_tools=["add", "echo"], require_approval="always")]
        many = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools})
        twenty = requests_heard(counting) - before - single
    assert one.status_code == 200 and many.status_code == 200, many.text
    assert twenty == single, (single, twenty)  # one session, one listing
    listings = {i["server_label"]: [t["name"] for t in i["tools"]]
                for i in many.json()["output"] if i["type"] == "mcp_list_tools"}
    assert len(listings) == 20 and "weather" in listings["s7"]
    assert listings["only_add"] == ["add"] and sorted(listings["asks"]) == ["add", "echo"]


async def test_each_label_runs_its_own_calls_on_the_shared_session(counting: str) -> None:
    url = f"{counting}/private"
    tools = [tool(url, "a"), tool(url, "b", require_approval="always")]
    ran = Switch(call("add", {"a": 5, "b": 5}, ns="a"), ("<|message|>10<|end|>", answer("done")))
    asks = Switch(call("add", {"a": 1, "b": 2}, ns="b"))
    async with gateway(ran.transport(), cfg(url)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools})
    async with gateway(asks.transport(), cfg(url)) as c:
        asked = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools})
    assert r.status_code == 200 and asked.status_code == 200, (r.text, asked.text)
    calls = [(i["server_label"], i["output"]) for i in r.json()["output"] if i["type"] == "mcp_call"]
    assert calls == [("a", "10")]
    requests = [(i["server_label"], i["name"]) for i in asked.json()["output"]
                if i["type"] == "mcp_approval_request"]
    assert requests == [("b", "add")]  # b's policy, not a's


async def test_other_headers_are_another_server(counting: str) -> None:
    url = f"{counting}/private"
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg(url)) as c:
        before = requests_heard(counting)
        await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [tool(url, "a")]})
        single = requests_heard(counting) - before
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [
            tool(url, "a", headers={"x-who": "1"}), tool(url, "b", headers={"x-who": "2"})]})
        two = requests_heard(counting) - before - single
    assert r.status_code == 200, r.text
    assert two == 2 * single


async def test_sessions_share_one_tls_context_built_off_the_loop(counting: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each client building its own TLS context read the CA bundle on the event loop: 20-35 ms
    per session, the most of what 20 sessions blocked it."""
    built: list[bool] = []
    default = httpcore2.default_ssl_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(True)
        return default(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    monkeypatch.setattr(egress, "_ssl", None, raising=False)
    sessions = [McpSession(McpServer(f"s{i}", f"{counting}/private", {"x-n": str(i)}),
                           connect_timeout=10, max_output_chars=1000) for i in range(3)]
    try:
        for session in sessions:
            assert await session.open()
    finally:
        for session in sessions:
            await session.aclose()
    assert len(built) == 1


async def test_a_sessions_work_runs_off_the_callers_loop(counting: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's work (handshake, listing: pydantic over whatever the server sends) runs on the
    MCP loop's thread, not on the loop that serves requests (and ``/health``)."""
    threads: set[str] = set()
    hooks = egress.guard_hooks

    def watched(*args: Any, **kwargs: Any) -> Any:
        made = hooks(*args, **kwargs)

        async def seen(request: Any) -> None:
            threads.add(threading.current_thread().name)

        return {**made, "request": [seen, *made["request"]]}

    monkeypatch.setattr(egress, "guard_hooks", watched)
    session = McpSession(McpServer("s", f"{counting}/private"), connect_timeout=10, max_output_chars=1000)
    try:
        assert await session.open()
        assert (await session.call("add", {"a": 1, "b": 2}, 10)).output == "3"
    finally:
        await session.aclose()
    assert threads == {"mcp-sessions"}, threads


@pytest.mark.parametrize("labels", ["one label", "one label each"])
async def test_the_cap_counts_entries_not_servers(counting: str, labels: str) -> None:
    """200 entries naming one URL are 200 tools, whether or not they repeat a label."""
    url = f"{counting}/private"
    before = requests_heard(counting)
    tools = [tool(url, "s" if labels == "one label" else f"s{i}") for i in range(200)]
    async with gateway(Switch(answer("hi")).transport(), cfg(url)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "array_above_max_length" and "200" in r.json()["error"]["message"]
    assert requests_heard(counting) == before


async def test_the_cap_comes_before_the_other_hosted_tools_are_checked(counting: str) -> None:
    """With file_search and web_search beside them, too many mcp tools are refused first: no
    vector store is looked up (an unknown id would be a 404) and no server is asked."""
    url = f"{counting}/private"
    before = requests_heard(counting)
    tools = [*(tool(url, f"s{i}") for i in range(21)),
             {"type": "file_search", "vector_store_ids": ["vs_does_not_exist"]},
             {"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]
    async with gateway(Switch(answer("hi")).transport(), cfg(url)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools})
        ok = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": tools[19:]})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == ("tools", "array_above_max_length")
    assert requests_heard(counting) == before
    assert ok.status_code == 404, ok.text  # two mcp tools: then the unknown store is what is wrong
