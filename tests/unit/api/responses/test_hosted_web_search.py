"""``web_search`` run by the gateway over the offline index (issue 27): the browser functions
the model sees, ``web_search_call`` items and events, sources with ``include``, citations,
forcing, what happens without a provider, and earlier calls re-rendered.

The model is the prompt-dependent fake of :mod:`tests.support.switch_model`; the corpus is
``tests/fixtures/web_corpus``.  Bodies and events are checked with the OpenAI SDK's types and
the Open Responses validators (:mod:`tests.support.openresponses`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import Response

from tests.support.gateway import MODEL, gateway, sse_payloads, with_tool
from tests.support.openresponses import check_stream, validate_response
from tests.support.switch_model import Switch, answer, call

CORPUS = Path(__file__).resolve().parents[3] / "fixtures" / "web_corpus"
SITE = "https://www.openresponses.org/"
Json = dict[str, Any]


def cfg(tmp_path: Path, documents: Path | None = CORPUS) -> Any:
    web = {"documents": str(documents), "index": str(tmp_path / "web.sqlite3")} if documents else {}
    return with_tool("web_search", **web)


def searching(query: str = "open responses agentic loop") -> Switch:
    """Searches until results are in the prompt, then answers citing the first source."""
    return Switch(call("search", {"query": query}, ns="browser"),
                  ("Search results for", answer(f"See {SITE} for the agentic loop.")))


async def test_search_then_answer_with_sources_and_a_citation(tmp_path: Path) -> None:
    model = searching()
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": "What is the agentic loop?", "tools": [{"type": "web_search"}],
            "include": ["web_search_call.action.sources"]})
    assert r.status_code == 200, r.text
    validate_response(r.json())
    body = Response.model_validate(r.json())
    assert [i.type for i in body.output] == ["reasoning", "web_search_call", "message"]
    ws = body.output[1]
    assert ws.type == "web_search_call" and ws.status == "completed"
    assert ws.action.type == "search" and ws.action.query == "open responses agentic loop"
    assert ws.action.sources is not None and ws.action.sources[0].url == SITE
    text = body.output[2].content[0]  # type: ignore[union-attr]
    assert text.type == "output_text" and text.text == f"See {SITE} for the agentic loop."
    cite = text.annotations[0]
    assert cite.type == "url_citation" and cite.url == SITE and cite.title == "Open Responses"
    assert text.text[cite.start_index:cite.end_index] == SITE
    # The model was shown gpt-oss's built-in browser (in the system message, as openai-harmony
    # writes it), and read the results in its second prompt.
    system = model.prompts[0].split("<|end|>", 1)[0]
    assert "## browser" in system and "namespace browser {" in system and "type search" in system
    assert "<|start|>developer" not in model.prompts[0]
    assert "Search results for" in model.prompts[1]
    assert "L0: 【0†Open Responses†www.openresponses.org】" in model.prompts[1]  # a link to open(0)
    assert "ocm:tools_not_run" not in r.json()


async def test_sources_only_with_include_and_streamed_events(tmp_path: Path) -> None:
    model = searching()
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": "loop?", "tools": [{"type": "web_search_preview"}], "stream": True})
    events = [e for e in sse_payloads(r.text) if e != "[DONE]"]
    final = check_stream(events)
    types = [e["type"] for e in events]
    for name in ("response.web_search_call.in_progress", "response.web_search_call.searching",
                 "response.web_search_call.completed", "response.output_text.annotation.added"):
        assert types.count(name) == 1, (name, types)
    assert types.index("response.web_search_call.completed") < types.index("response.output_text.delta")
    ws = next(i for i in final["output"] if i["type"] == "web_search_call")
    assert ws["action"] == {"type": "search", "query": "open responses agentic loop"}  # no sources


async def test_open_and_find_and_a_cursor_citation(tmp_path: Path) -> None:
    """gpt-oss's browser: each display gets a cursor, lines are numbered, and the answer's
    ``【cursor†L…】`` citation becomes a ``url_citation`` over its own characters."""
    model = Switch(call("open", {"id": SITE}, ns="browser"),
                   ("Find results for text", answer("It is the core 【1†L3】.")),
                   ("[0] Open Responses (", call("find", {"pattern": "agentic"}, ns="browser")))
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "Open it.",
                                                 "tools": [{"type": "web_search"}]})
    assert r.status_code == 200, r.text
    calls = [i for i in r.json()["output"] if i["type"] == "web_search_call"]
    assert [c["action"] for c in calls] == [{"type": "open_page", "url": SITE},
                                            {"type": "find_in_page", "url": SITE, "pattern": "agentic"}]
    assert f"[0] Open Responses ({SITE})\n**viewing lines [0 - 12] of 12**\n\nL0: # Open Responses" in (
        model.prompts[1])
    assert "L10: The agentic loop is its core principle" in model.prompts[1]
    assert "[1] Find results for text: `agentic`" in model.prompts[2]
    assert "L0: # 【0†match at L8】" in model.prompts[2]
    text = r.json()["output"][-1]["content"][0]
    assert text["annotations"] == [{"type": "url_citation", "url": SITE, "title": "Open Responses",
                                    "start_index": 15, "end_index": 21}]
    assert text["text"][15:21] == "【1†L3】"
    assert calls[1]["ocm:output"].startswith("[1] Find results")  # kept: a later turn reads it again


async def test_allowed_domains_and_a_page_not_in_the_index(tmp_path: Path) -> None:
    model = Switch(call("open", {"id": "http://169.254.169.254/latest/meta-data/"}, ns="browser"),
                   ("No page", answer("Could not open it.")))
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "Open it.", "tools": [
            {"type": "web_search", "filters": {"allowed_domains": ["openresponses.org"]}}]})
    assert r.status_code == 200, r.text
    ws = next(i for i in r.json()["output"] if i["type"] == "web_search_call")
    assert ws["status"] == "failed" and r.json()["status"] == "completed"
    assert "No page 'http://169.254.169.254/latest/meta-data/' is available" in model.prompts[1]


async def test_forced_web_search_is_the_conformance_case(tmp_path: Path) -> None:
    # Forced: the prompt ends "<|channel|>commentary to=" (the browser namespace is the only
    # choice), so the model continues the recipient.
    model = Switch('browser.search <|constrain|>json<|message|>{"query":"OpenResponses"}<|call|>',
                   ("Search results for", answer(f"See {SITE}.")))
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": "Find the most relevant cached result for OpenResponses.",
            "tools": [{"type": "web_search", "external_web_access": False}],
            "tool_choice": {"type": "web_search"}, "include": ["web_search_call.action.sources"]})
    assert r.status_code == 200, r.text
    assert "web_search_call" in [i["type"] for i in r.json()["output"]]
    assert model.prompts[0].endswith("<|start|>assistant<|channel|>commentary to=")
    assert len(model.ids) == 2 and model.prompts[1].endswith("<|start|>assistant")  # forced once


async def test_without_a_provider_web_search_is_not_run(tmp_path: Path) -> None:
    model = Switch(answer("No search here."))
    async with gateway(model.transport(), cfg(tmp_path, documents=None)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                 "tools": [{"type": "web_search"}]})
        forced = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [
            {"type": "web_search"}], "tool_choice": {"type": "web_search"}})
    assert r.status_code == 200 and r.json()["ocm:tools_not_run"] == ["web_search"]
    assert "browser" not in model.prompts[0]
    assert forced.status_code == 400 and forced.json()["error"]["code"] == "unsupported_tool_choice"


async def test_an_earlier_search_is_re_rendered(tmp_path: Path) -> None:
    model = Switch(answer("Again."))
    earlier: Json = {"type": "web_search_call", "id": "ws_1", "status": "completed",
                     "action": {"type": "search", "query": "agentic loop",
                                "sources": [{"type": "url", "url": SITE}]}}
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "tools": [{"type": "web_search"}], "input": [
            {"role": "user", "content": "Search."}, earlier,
            {"role": "assistant", "content": "Found it."}, {"role": "user", "content": "Again?"}]})
    assert r.status_code == 200, r.text
    assert "to=browser.search" in model.prompts[0] and '"agentic loop"' in model.prompts[0]
    assert f"sources {SITE}" in model.prompts[0]


async def test_a_later_turn_reads_the_results_again_and_numbers_after_them(tmp_path: Path) -> None:
    """The item keeps what the model read (``ocm:output``): the next turn re-renders it as it
    was, its cursors go on from there, and an answer may cite the earlier display."""
    model = Switch(call("search", {"query": "open responses agentic loop"}, ns="browser"),
                   ("[1] Open Responses (", answer("Found.")),
                   ("[0] Search results", call("open", {"id": 0}, ns="browser")))
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        first = await c.post("/v1/responses", json={"model": MODEL, "input": "loop?", "store": True,
                                                     "tools": [{"type": "web_search"}]})
        assert first.status_code == 200, first.text
        kept = [i["ocm:output"] for i in first.json()["output"] if i["type"] == "web_search_call"]
        assert kept[0].startswith("[0] Search results for `open responses agentic loop`")
        assert kept[1].startswith(f"[1] Open Responses ({SITE})")
        model.rules = (("[2] Search results", answer("As before 【1†L2】, not 【0†L0】.")),)
        again = await c.post("/v1/responses", json={"model": MODEL, "input": "again?",
                                                     "previous_response_id": first.json()["id"],
                                                     "tools": [{"type": "web_search"}]})
    assert again.status_code == 200, again.text
    assert kept[0] in model.prompts[3] and kept[1] in model.prompts[3]  # the earlier displays, verbatim
    assert "[2] Search results for `open responses agentic loop`" in model.prompts[4]
    text = again.json()["output"][-1]["content"][0]  # an earlier page is citable, its results page not
    assert [(a["url"], text["text"][a["start_index"]:a["end_index"]]) for a in text["annotations"]] == [
        (SITE, "【1†L2】")]


@pytest.mark.parametrize("tool", [{"type": "web_search", "search_context_size": "huge"},
                                  {"type": "web_search", "filters": {"allowed_domains": "x.com"}}])
async def test_bad_web_search_options_are_400s(tmp_path: Path, tool: Json) -> None:
    async with gateway(Switch(answer("x")).transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": [tool]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


async def test_websocket_mode_and_background_run_the_loop(tmp_path: Path) -> None:
    """The same loop over WebSocket mode (a real uvicorn server) and as a background response."""
    from websockets.asyncio.client import connect

    from tests.support.ws import create, served, turn

    model = searching()
    async with served(model.transport(), cfg(tmp_path)) as host, connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(create(input="loop?", tools=[{"type": "web_search"}]))
        events, error = await turn(ws)
    assert error is None and events[-1]["type"] == "response.completed"
    kinds = [i["type"] for i in events[-1]["response"]["output"]]
    assert kinds == ["reasoning", "web_search_call", "message"]
    model = searching()
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "loop?", "background": True,
                                                 "tools": [{"type": "web_search"}]})
        rid = r.json()["id"]
        for _ in range(200):
            got = (await c.get(f"/v1/responses/{rid}")).json()
            if got["status"] not in ("queued", "in_progress"):
                break
            await asyncio.sleep(0.02)
    assert got["status"] == "completed"
    assert [i["type"] for i in got["output"]] == ["reasoning", "web_search_call", "message"]


async def test_allowed_tools_can_name_web_search(tmp_path: Path) -> None:
    """``allowed_tools`` naming the hosted tool: required mode forces a browser call (the
    client function it does not list is not among the forced names); a plain "required" with
    only a hosted tool on offer is accepted."""
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    model = Switch('browser.search <|constrain|>json<|message|>{"query":"agentic loop"}<|call|>',
                   ("Search results for", answer("Done.")))
    async with gateway(model.transport(), cfg(tmp_path)) as c:
        r = await c.post("/v1/responses", json={
            "model": MODEL, "input": "x", "tools": [{"type": "web_search"}, weather],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]}})
        plain = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tool_choice": "required",
                                                     "tools": [{"type": "web_search"}]})
    assert r.status_code == 200, r.text
    assert model.prompts[0].endswith("<|channel|>commentary to=")  # forced, into the browser
    assert [i["type"] for i in r.json()["output"]] == ["web_search_call", "message"]
    assert plain.status_code == 200, plain.text
