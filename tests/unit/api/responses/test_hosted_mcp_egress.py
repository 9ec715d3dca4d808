"""The allow-list holds on every MCP transport (issue 35, item 7): no redirect is followed, and
every request a session makes (the SSE transport's ``endpoint`` included) is checked against the
allow-list again.  The server is :mod:`tests.support.mcp_hostile`; its ``/private`` and
``/messages/`` stand for what the operator did not allow, and ``/hits`` says whether the
gateway asked for them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.tools.mcp import McpServer
from app.tools.search import SearchUnavailable
from app.tools.search_mcp import McpSearch
from tests.support.gateway import MODEL, gateway
from tests.support.gateway import allowing_mcp as cfg
from tests.support.mcp_hostile import running
from tests.support.switch_model import Switch, answer, call

pytestmark = pytest.mark.asyncio
Json = dict[str, Any]


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with running() as url:
        yield url


def hits(url: str) -> dict[str, int]:
    return dict(httpx.get(f"{url}/hits").json())


def mcp(url: str) -> Json:
    return {"type": "mcp", "server_label": "tools", "server_url": url, "require_approval": "never"}


async def _refused(hostile: str, allowed: str, url: str, kept_out: str) -> str:
    before = hits(hostile).get(kept_out, 0)
    model = Switch(answer("hi"))
    async with gateway(model.transport(), cfg(allowed)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [mcp(url)]})
    assert r.status_code == 424, r.text
    assert r.json()["error"]["code"] == "tool_server_unavailable"
    assert hits(hostile).get(kept_out, 0) == before, f"the gateway asked for {kept_out}"
    assert model.prompts == []
    return str(r.json()["error"]["message"])


async def test_streamable_http_does_not_follow_a_same_origin_redirect(hostile: str) -> None:
    message = await _refused(hostile, f"{hostile}/mcp", f"{hostile}/mcp/hop", "/private")
    assert "redirect" in message and "307" in message, message


async def test_sse_does_not_follow_a_same_origin_redirect(hostile: str) -> None:
    message = await _refused(hostile, f"{hostile}/hop", f"{hostile}/hop/sse", "/sse")
    assert "redirect" in message, message


async def test_the_sse_endpoint_must_lie_inside_the_allowed_prefix(hostile: str) -> None:
    """An allow-list of ``/sse`` does not cover the ``/messages/`` the server's ``endpoint``
    event names: the POSTs would leave the prefix, so the session is refused."""
    message = await _refused(hostile, f"{hostile}/sse", f"{hostile}/sse", "/messages/")
    assert "/messages/" in message and "allowed" in message, message


async def test_sse_works_when_the_prefix_covers_its_endpoint(hostile: str) -> None:
    model = Switch(call("add", {"a": 1, "b": 1}), ("<|message|>2<|end|>", answer("2")))
    async with gateway(model.transport(), cfg(f"{hostile}/sse", f"{hostile}/messages/")) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "1+1",
                                                 "tools": [mcp(f"{hostile}/sse")]})
    assert r.status_code == 200, r.text
    assert [i["output"] for i in r.json()["output"] if i["type"] == "mcp_call"] == ["2"]


async def test_a_redirect_in_the_middle_of_a_session_is_not_followed(hostile: str) -> None:
    """``/mcp/late`` lists normally and redirects ``tools/call`` to ``/private`` (where the
    session id is valid too): the call fails, the tool never runs there."""
    before = hits(hostile).get("/private", 0)
    model = Switch(call("add", {"a": 2, "b": 2}), ("MCP server", answer("It failed.")))
    async with gateway(model.transport(), cfg(f"{hostile}/mcp")) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "2+2",
                                                 "tools": [mcp(f"{hostile}/mcp/late")]})
    assert r.status_code == 200, r.text
    item = next(i for i in r.json()["output"] if i["type"] == "mcp_call")
    assert item["status"] == "failed" and item["output"] in (None, ""), item
    assert item["error"]["type"] == "http_error" and item["error"]["code"] == 502, item
    assert "redirect" in item["error"]["message"], item
    assert hits(hostile).get("/private", 0) == before


async def test_search_over_mcp_does_not_follow_a_redirect(hostile: str) -> None:
    """The operator's own search server (``[tools.web_search] mcp_server``) redirecting: the
    search fails, the redirect's target is never asked."""
    before = hits(hostile).get("/private", 0)
    search = McpSearch(McpServer("search", f"{hostile}/mcp/hop"), "search", connect_timeout=5)
    with pytest.raises(SearchUnavailable, match="redirect"):
        await search.search("q", limit=3)
    assert hits(hostile).get("/private", 0) == before


async def test_a_json_answer_is_held_to_the_bound_of_an_sse_event() -> None:
    """The SDK bounds one SSE event to 1 MiB but reads a JSON answer whole: a server answering
    in JSON gets the same bound (5 MB of ``huge`` is a failed call, not 5 MB in memory)."""
    with running(json_response=True) as url:
        model = Switch(call("huge", {}), ("byte limit", answer("Too long.")))
        async with gateway(model.transport(), cfg(f"{url}/private")) as c:
            r = await c.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                     "tools": [mcp(f"{url}/private")]})
    assert r.status_code == 200, r.text
    item = next(i for i in r.json()["output"] if i["type"] == "mcp_call")
    assert item["status"] == "failed" and item["error"]["type"] == "mcp_protocol_error", item
    assert "exceeded the 1048576 byte limit" in item["error"]["message"], item
