"""A SearXNG instance as the web search provider (app/tools/search_searxng.py), against a
loopback server that replays real SearXNG answers (tests/fixtures/searxng/README.md says how
they were recorded), alone and through the whole gateway."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from app.tools.search import SearchUnavailable
from app.tools.search_searxng import SearxngSearch
from tests.support.gateway import MODEL, config, gateway
from tests.support.http_thread import Quiet, serving
from tests.support.paths import ROOT
from tests.support.switch_model import Switch, answer, call

FIXTURES = ROOT / "tests" / "fixtures" / "searxng"
SLOTS = "https://docs.example.org/llama-cpp/server/slots"
RECORDED = {"llama.cpp slots": "search-llama-slots.json", "nothing matches this": "search-empty.json",
            "engines down": "search-unresponsive.json"}


class _Replay(Quiet):
    """SearXNG's ``/search``: the recorded body for a recorded query (as served: JSON, 200);
    403 without ``format=json`` (what SearXNG does when json is not enabled); ``broken``
    answers an HTML error page."""

    seen: ClassVar[list[dict[str, list[str]]]] = []

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        self.seen.append(query)
        q = query.get("q", [""])[0]
        if parts.path == "/hop/search":  # a same-origin redirect to the real endpoint
            self.reply(302, "text/plain", b"", Location="/search?" + parts.query)
        elif parts.path != "/search" or query.get("format") != ["json"]:
            self.reply(403, "text/html", b"<html>Forbidden</html>")
        elif q == "broken":
            self.reply(500, "text/html", b"<html>Internal Server Error</html>")
        else:
            recorded = FIXTURES / RECORDED.get(q, "search-empty.json")
            self.reply(200, "application/json", recorded.read_bytes())


@pytest.fixture(scope="module")
def searxng() -> Iterator[str]:
    with serving(_Replay) as url:
        yield url


async def test_results_become_hits(searxng: str) -> None:
    provider = SearxngSearch(searxng + "/", categories="general,it", language="en")
    try:
        hits = await provider.search("llama.cpp slots", limit=10)
        assert [h.url for h in hits] == [SLOTS, SLOTS + "-endpoint",
                                         "https://docs.example.org/llama-cpp/server/prompt-cache",
                                         "https://docs.example.org/harmony/response-format"]
        assert hits[0].title == "llama.cpp server: parallel decoding with slots"
        assert hits[0].snippet.startswith("The llama.cpp server splits its context into N slots")
        assert _Replay.seen[-1] == {"q": ["llama.cpp slots"], "format": ["json"],
                                    "categories": ["general,it"], "language": ["en"]}
        assert len(await provider.search("llama.cpp slots", limit=2)) == 2
        assert await provider.search("llama.cpp slots", limit=10, domains=["example.com"]) == []
        assert len(await provider.search("llama.cpp slots", limit=10, domains=["example.org"])) == 4
        assert await provider.search("nothing matches this", limit=10) == []  # engines fine: no hits
        assert await provider.page(SLOTS) is None  # the gateway fetches no pages
    finally:
        await provider.aclose()


async def test_a_redirect_is_not_followed(searxng: str) -> None:
    """Issue 35: no fetcher of the gateway follows a redirect (the MCP transports, SearXNG)."""
    provider = SearxngSearch(searxng + "/hop", timeout=5)
    before = len(_Replay.seen)
    try:
        with pytest.raises(SearchUnavailable, match="HTTP 302"):
            await provider.search("llama.cpp slots", limit=5)
    finally:
        await provider.aclose()
    assert len(_Replay.seen) == before + 1  # the redirect itself, and not where it pointed


@pytest.mark.parametrize(("where", "query", "says"), [
    ("", "engines down", "engines did not answer (loopback docs)"),
    ("", "broken", "HTTP 500"),
    ("/not-searxng", "llama.cpp slots", "HTTP 403 (is format json enabled"),
    ("closed", "llama.cpp slots", "could not be reached (ConnectError)"),
])
async def test_a_failing_service_is_a_clear_search_error(searxng: str, where: str, query: str,
                                                         says: str) -> None:
    url = "http://127.0.0.1:9" if where == "closed" else searxng + where
    provider = SearxngSearch(url, timeout=5)
    try:
        with pytest.raises(SearchUnavailable, match=says.replace("(", r"\(").replace(")", r"\)")):
            await provider.search(query, limit=5)
    finally:
        await provider.aclose()


def cfg(searxng: str) -> Any:
    c = config(context_window=16384)
    tools = c.tools.model_validate({"web_search": {"searxng_url": searxng}})
    return c.model_copy(update={"tools": tools})


async def test_web_search_through_searxng(searxng: str) -> None:
    """The model searches, opens the first result (its summary: the gateway fetches no pages),
    then answers citing it; a second response searches while the engines are down: its call
    fails, the model reads why, and the response still completes."""
    model = Switch(call("search", {"query": "llama.cpp slots"}, ns="browser"),
                   ("full text is not available", answer(f"Slots decode in parallel: {SLOTS}")),
                   ("engines did not answer", answer("The search is down.")),
                   ("Search results for", call("open", {"id": 0}, ns="browser")),
                   ("why is it down", call("search", {"query": "engines down"}, ns="browser")))
    async with gateway(model.transport(), cfg(searxng)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "slots?",
                                                 "tools": [{"type": "web_search"}],
                                                 "include": ["web_search_call.action.sources"]})
        down = await c.post("/v1/responses", json={"model": MODEL, "input": "why is it down",
                                                    "tools": [{"type": "web_search"}]})
        offline = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [
            {"type": "web_search", "external_web_access": False}]})
    assert r.status_code == 200, r.text
    calls = [i for i in r.json()["output"] if i["type"] == "web_search_call"]
    assert [s["url"] for s in calls[0]["action"]["sources"]][:2] == [SLOTS, SLOTS + "-endpoint"]
    assert calls[1]["action"] == {"type": "open_page", "url": SLOTS} and calls[1]["status"] == "completed"
    assert "【0†llama.cpp server: parallel decoding with slots†docs.example.org】" in model.prompts[1]
    assert "L1: holds one sequence and its KV cache" in model.prompts[2]
    text = r.json()["output"][-1]["content"][0]
    assert text["annotations"][0]["url"] == SLOTS
    assert down.status_code == 200, down.text
    failed = [i for i in down.json()["output"] if i["type"] == "web_search_call"]
    assert failed[0]["status"] == "failed" and down.json()["status"] == "completed"
    assert down.json()["output"][-1]["content"][0]["text"] == "The search is down."
    assert offline.status_code == 400  # SearXNG searches the live web
