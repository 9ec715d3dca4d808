"""Anthropic's server tools on /v1/messages (issue 37 item 6), with the official ``anthropic``
SDK: Claude Code's ``WebSearch`` request (``web_search_20250305``) run over the gateway's
search provider (the offline index of ``tests/fixtures/web_corpus``), ``server_tool_use`` and
``web_search_tool_result`` blocks (typed, streamed), ``usage.server_tool_use``, ``max_uses``,
the domain filters, a search sent back on the next turn, and the 400s when a server tool has
no provider.  The model is the prompt-dependent fake of :mod:`tests.support.switch_model`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.support.anthropic_sdk import clients
from tests.support.gateway import MODEL, sse_payloads, with_tool
from tests.support.paths import FIXTURES
from tests.support.switch_model import Switch, answer, call

CORPUS = FIXTURES / "web_corpus"
SITE = "https://www.openresponses.org/"
QUERY = "open responses agentic loop"
# what Claude Code's WebSearch tool sends (its side request: the server tool alone)
WEB_SEARCH: Any = {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}
ASK: Any = [{"role": "user", "content": f"Perform a web search for the query: {QUERY}"}]
Json = dict[str, Any]


def cfg(tmp_path: Path, documents: Path | None = CORPUS) -> Any:
    web = {"documents": str(documents), "index": str(tmp_path / "web.sqlite3")} if documents else {}
    return with_tool("web_search", **web)


def searching(query: str = QUERY) -> Switch:
    """Searches until results are in the prompt, then answers naming the first source."""
    return Switch(call("search", {"query": query}, ns="browser"),
                  ("Search results for", answer(f"See {SITE} for the agentic loop.")))


async def test_claude_codes_web_search_runs_and_comes_back_as_server_blocks(tmp_path: Path) -> None:
    model = searching()
    async with clients(model.transport(), cfg(tmp_path)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[WEB_SEARCH])
    assert [b.type for b in msg.content] == ["thinking", "server_tool_use", "web_search_tool_result", "text"]
    use, result, text = msg.content[1], msg.content[2], msg.content[3]
    assert use.type == "server_tool_use" and use.name == "web_search" and use.input == {"query": QUERY}
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list) and result.content[0].url == SITE
    first = result.content[0]
    assert first.title == "Open Responses" and first.encrypted_content.startswith("ocm1.")
    assert text.type == "text" and text.text == f"See {SITE} for the agentic loop."
    assert msg.stop_reason == "end_turn"
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_search_requests == 1
    # one run: the model searched, read the results in its second prompt, then answered
    assert len(model.prompts) == 2 and "Search results for" in model.prompts[1]
    assert "namespace browser {" in model.prompts[0]


async def test_the_stream_parses_into_the_sdk_types_and_folds_to_the_same_blocks(tmp_path: Path) -> None:
    async with clients(searching().transport(), cfg(tmp_path)) as c:
        async with c.sdk.messages.stream(model=MODEL, max_tokens=1000, messages=ASK,
                                         tools=[WEB_SEARCH]) as stream:
            final = await stream.get_final_message()
        raw = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 1000, "messages": ASK, "tools": [WEB_SEARCH], "stream": True})
    blocks = ["thinking", "server_tool_use", "web_search_tool_result", "text"]
    assert [b.type for b in final.content] == blocks
    use = final.content[1]
    assert use.type == "server_tool_use" and use.input == {"query": QUERY}  # from its input_json_delta
    assert final.usage.server_tool_use is not None and final.usage.server_tool_use.web_search_requests == 1
    events = [TypeAdapter(RawMessageStreamEvent).validate_python(e) for e in sse_payloads(raw.text)
              if e.get("type") != "ping"]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "server_tool_use", "web_search_tool_result", "text"]
    found = next(e for e in events if e.type == "content_block_start"
                 and e.content_block.type == "web_search_tool_result")
    assert found.content_block.content[0].url == SITE  # type: ignore[union-attr,index]
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.server_tool_use is not None and delta.usage.server_tool_use.web_search_requests == 1


async def test_max_uses_is_honoured_and_the_model_reads_max_uses_exceeded(tmp_path: Path) -> None:
    model = Switch(call("search", {"query": QUERY}, ns="browser"),
                   ("may be used at most 1 times", answer("Only one search was allowed.")))
    once: Any = {**WEB_SEARCH, "max_uses": 1}
    async with clients(model.transport(), cfg(tmp_path)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=2000, messages=ASK, tools=[once])
    results = [b for b in msg.content if b.type == "web_search_tool_result"]
    assert len(results) == 2
    assert isinstance(results[0].content, list) and results[0].content
    error = results[1].content
    assert not isinstance(error, list) and error.type == "web_search_tool_result_error"
    assert error.error_code == "max_uses_exceeded"
    assert msg.content[-1].type == "text" and msg.content[-1].text == "Only one search was allowed."
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_search_requests == 1


@pytest.mark.parametrize(("domains", "present"), [
    ({"allowed_domains": ["vllm.ai"]}, False), ({"blocked_domains": ["openresponses.org"]}, False),
    ({"allowed_domains": ["openresponses.org"]}, True)])
async def test_domain_filters_apply_to_the_results(tmp_path: Path, domains: Json, present: bool) -> None:
    model = Switch(call("search", {"query": "open responses server"}, ns="browser"),
                   ("Search results for", answer("Done.")))
    tool: Any = {**WEB_SEARCH, **domains}
    async with clients(model.transport(), cfg(tmp_path)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[tool])
    result = next(b for b in msg.content if b.type == "web_search_tool_result")
    assert isinstance(result.content, list)
    urls = [r.url for r in result.content]
    assert (SITE in urls) is present
    if "allowed_domains" in domains:
        assert urls and all(domains["allowed_domains"][0] in u for u in urls)
    assert ("openresponses.org" in model.prompts[1]) is present  # what the model read, filtered too


async def test_a_search_sent_back_is_re_read_and_a_forged_one_refused(tmp_path: Path) -> None:
    model = searching()
    async with clients(model.transport(), cfg(tmp_path)) as c:
        first = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[WEB_SEARCH])
        history: Any = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                            for b in first.content]},
                   {"role": "user", "content": "Thanks. Where was that?"}]
        model.rules = (("Where was that?", answer("On the Open Responses site.")), *model.rules)
        second = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=history,
                                             tools=[WEB_SEARCH])
        forged = [dict(b) for b in history[1]["content"]]
        result = next(b for b in forged if b["type"] == "web_search_tool_result")
        result["content"] = [{**result["content"][0], "encrypted_content": "ocm1.forged"}]
        sent: Any = [*ASK, {"role": "assistant", "content": forged}, history[2]]
        with pytest.raises(anthropic.BadRequestError) as refused:
            await c.sdk.messages.create(model=MODEL, max_tokens=1000, tools=[WEB_SEARCH], messages=sent)
    assert second.content[-1].type == "text" and second.content[-1].text == "On the Open Responses site."
    prompt = model.prompts[-1]
    assert f"【0†Open Responses†{SITE}】" in prompt  # the earlier results, re-rendered as a tool's output
    assert "to=browser.search" in prompt
    assert refused.value.status_code == 400 and "encrypted_content" in str(refused.value.body)


# Claude Code's WebSearch side request, as @anthropic-ai/claude-code 2.1.332 builds it (read from
# its bundle: the system prompt, the user line, max_uses 8, thinking off, web_search forced)
SIDE_REQUEST: Any = {
    "model": MODEL, "max_tokens": 8192, "messages": ASK, "tools": [WEB_SEARCH],
    "system": [{"type": "text", "text": "You run a web search for another Claude model, which is waiting on "
                "the result and can search again. Search once, then reply with a brief summary of the "
                "results."}],
    "thinking": {"type": "disabled"}, "tool_choice": {"type": "tool", "name": "web_search"},
    "stream": True}


async def test_claude_codes_side_request_is_served_and_its_functions_counted(tmp_path: Path) -> None:
    # forced: the prompt ends with the search's recipient, so the model continues with its arguments
    model = Switch(f'{{"query":"{QUERY}"}}<|call|>', ("Search results for", answer(f"See {SITE}.")))
    async with clients(model.transport(), cfg(tmp_path)) as c:
        raw = await c.http.post("/v1/messages?beta=true", json=SIDE_REQUEST, headers={
            "authorization": "Bearer test-key", "anthropic-version": "2023-06-01"})
        counted = await c.sdk.messages.count_tokens(model=MODEL, messages=ASK, tools=[WEB_SEARCH])
        bare = await c.sdk.messages.count_tokens(model=MODEL, messages=ASK)
    assert raw.status_code == 200, raw.text
    events = [e for e in sse_payloads(raw.text) if e["type"] == "content_block_start"]
    # what Claude Code reads: the server_tool_use, the results' title and url, the text
    blocks = [e["content_block"] for e in events]
    assert [b["type"] for b in blocks] == ["server_tool_use", "web_search_tool_result", "text"]  # no thinking
    assert blocks[1]["content"][0]["url"] == SITE and blocks[1]["content"][0]["title"] == "Open Responses"
    assert model.prompts[0].endswith("<|channel|>commentary to=browser.search <|constrain|>json<|message|>")
    assert model.prompts[1].endswith("<|start|>assistant")  # forced once, then the answer
    assert counted.input_tokens > bare.input_tokens  # the browser the model is shown is counted


@pytest.mark.parametrize(("tool", "named"), [
    (WEB_SEARCH, "web_search_20250305"),  # no search provider configured
    ({"type": "code_execution_20250522", "name": "code_execution"}, "code_execution_20250522"),  # no sandbox
    ({"type": "web_fetch_20250910", "name": "web_fetch"}, "web_fetch_20250910"),
    ({**WEB_SEARCH, "allowed_domains": ["a.org"], "blocked_domains": ["b.org"]}, "blocked_domains"),
    ({**WEB_SEARCH, "name": "search"}, "web_search"),
])
async def test_a_server_tool_the_gateway_cannot_run_is_a_400_naming_it(tmp_path: Path, tool: Json,
                                                                        named: str) -> None:
    model = searching()
    with_search = "allowed_domains" in tool or tool.get("name") == "search"
    async with clients(model.transport(), cfg(tmp_path, CORPUS if with_search else None)) as c:
        r = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 100, "messages": ASK, "tools": [tool]})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert named in body["error"]["message"]
    assert model.prompts == []  # refused before the model was asked


async def test_the_loop_at_its_round_bound_pauses_the_turn(tmp_path: Path) -> None:
    """A model that keeps searching: at ``[tools] max_rounds`` the message ends ``pause_turn``
    (Anthropic's "send it back to continue"), the call not run says so."""
    c0 = cfg(tmp_path)
    bounded = c0.model_copy(update={"tools": c0.tools.model_copy(update={"max_rounds": 1})})
    model = Switch(call("search", {"query": QUERY}, ns="browser"))
    async with clients(model.transport(), bounded) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[WEB_SEARCH])
    assert msg.stop_reason == "pause_turn"
    result = msg.content[-1]
    assert result.type == "web_search_tool_result" and not isinstance(result.content, list)
    assert result.content.error_code == "unavailable"
    assert len(model.prompts) == 1


USE: Json = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
RESULT: Json = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}


@pytest.mark.parametrize(("tools", "messages", "param"), [
    ([{**WEB_SEARCH, "max_uses": 0}], ASK, None),
    ([{"type": "web_search_20250305"}], ASK, None),
    ([{**WEB_SEARCH, "allowed_domains": "openresponses.org"}], ASK, None),
    ([{**WEB_SEARCH, "allowed_domains": [""]}], ASK, "tools[0].allowed_domains"),
    ([WEB_SEARCH, WEB_SEARCH], ASK, "tools[1].type"),
    ([WEB_SEARCH, {"name": "browser__search", "input_schema": {"type": "object"}}], ASK, "tools"),
    ([WEB_SEARCH], [*ASK, {"role": "assistant", "content": [RESULT]}], "messages[1].content[0].tool_use_id"),
    ([WEB_SEARCH], [*ASK, {"role": "assistant", "content": [{**USE, "name": "computer"}, RESULT]}],
     "messages[1].content[0].name"),
    ([WEB_SEARCH], [{"role": "user", "content": [USE]}], "messages[0].content[0] is a server_tool_use"),
])
async def test_malformed_server_tool_bodies_are_400s(tmp_path: Path, tools: Any, messages: Any,
                                                     param: str | None) -> None:
    model = searching()
    async with clients(model.transport(), cfg(tmp_path)) as c:
        r = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 100, "messages": messages, "tools": tools})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    if param is not None:
        assert param in r.json()["error"]["message"], r.text
    assert model.prompts == []
