"""An MCP server as the web search provider (app/tools/search_mcp.py): hits read from a search
tool's text, pages from its fetch tool, through the whole gateway.  The server is the real
``mcp`` SDK server of tests/support/mcp_server.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.tools.search_mcp import hits_of
from tests.support.gateway import MODEL, config, gateway
from tests.support.mcp_server import running
from tests.support.switch_model import Switch, answer, call

SITE = "https://www.openresponses.org/"


def test_hits_of_common_shapes() -> None:
    text = ("Results:\n1. Open Responses - https://www.openresponses.org/\n   The loop.\n"
            "2. [vLLM docs](https://docs.vllm.ai/en/latest/)\n   Serving.\n"
            "Title only\nURL: https://example.com/a.\nhttps://example.com/a again\n")
    hits = hits_of(text)
    assert [h.url for h in hits] == [SITE, "https://docs.vllm.ai/en/latest/", "https://example.com/a"]
    assert hits[0].title == "Open Responses" and hits[0].snippet == "The loop."
    assert hits[2].title == "Title only"
    assert hits_of("no links here") == []


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running("streamable") as url:
        yield url


def cfg(server: str) -> Any:
    c = config(context_window=16384)
    tools = c.tools.model_validate({
        "mcp": {"servers": {"searcher": {"url": f"{server}/mcp"}}},
        "web_search": {"mcp_server": "searcher", "mcp_search_tool": "search", "mcp_open_tool": "fetch"}})
    return c.model_copy(update={"tools": tools})


async def test_web_search_through_an_mcp_server(server: str) -> None:
    model = Switch(call("search", {"query": "agentic loop"}, ns="browser"),
                   ("The page", answer(f"See {SITE}.")),
                   ("Search results for", call("open", {"id": 0}, ns="browser")))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "loop?",
                                                 "tools": [{"type": "web_search"}],
                                                 "include": ["web_search_call.action.sources"]})
        offline = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [
            {"type": "web_search", "external_web_access": False}]})
    assert r.status_code == 200, r.text
    calls = [i for i in r.json()["output"] if i["type"] == "web_search_call"]
    assert calls[0]["action"]["sources"] == [{"type": "url", "url": SITE},
                                             {"type": "url", "url": "https://docs.vllm.ai/en/latest/"}]
    assert calls[1]["action"] == {"type": "open_page", "url": SITE} and calls[1]["status"] == "completed"
    assert "【0†Open Responses†www.openresponses.org】" in model.prompts[1]
    assert "the agentic loop samples, runs\nL1: tools and samples again" in model.prompts[2]
    text = r.json()["output"][-1]["content"][0]
    assert text["annotations"][0]["url"] == SITE
    assert offline.status_code == 400  # this provider searches the live web


async def test_a_search_server_that_is_gone_fails_the_call_not_the_response() -> None:
    """The MCP search server is down when the model searches: the ``web_search_call`` fails, the
    model reads why, and the response completes (before: the response failed with a 424)."""
    c = config(context_window=16384)
    tools = c.tools.model_validate({"mcp": {"servers": {"searcher": {"url": "http://127.0.0.1:9/mcp"}}},
                                    "web_search": {"mcp_server": "searcher"}})
    model = Switch(call("search", {"query": "agentic loop"}, ns="browser"),
                   ("searcher", answer("Search is down.")))
    async with gateway(model.transport(), c.model_copy(update={"tools": tools})) as client:
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "loop?",
                                                      "tools": [{"type": "web_search"}]})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "completed"
    calls = [i for i in r.json()["output"] if i["type"] == "web_search_call"]
    assert calls[0]["status"] == "failed"
    assert r.json()["output"][-1]["content"][0]["text"] == "Search is down."
