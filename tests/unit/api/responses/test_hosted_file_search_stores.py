"""``file_search`` on the gateway's own knowledge wiring (no fakes of the stores): files uploaded
and ingested through the OpenAI SDK into the SQLite catalog and chunk index (no embedding model
configured: keyword ranking), then searched by ``client.responses.create(tools=[file_search])``
streamed and not; another key's store is the same 404 as a missing one.  The model is the
Harmony fake of :mod:`tests.support.switch_model`."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import openai
from fastapi import FastAPI

from app.main import create_app
from tests.support.gateway import MODEL, sse_payloads
from tests.support.openresponses import check_stream, validate_error_body, validate_response
from tests.support.switch_model import Switch, answer, call
from tests.unit.api.responses.test_hosted_file_search import ALICE, BOB, keyed, sdk

FAQ = b"# FAQ\nShipping to Norway costs 12 EUR and takes five days.\n"
CITE = "Shipping costs 12 EUR 【0:0†faq.md】."


@asynccontextmanager
async def served(model: Switch) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    app = create_app(keyed(), transport=model.transport())
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=transport, base_url="http://gateway", headers=ALICE) as c:
        yield c, app


async def _store(client: openai.AsyncOpenAI) -> tuple[str, str]:
    store = await client.vector_stores.create(name="faq")
    done = await client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("faq.md", io.BytesIO(FAQ)), poll_interval_ms=20)
    assert done.status == "completed", done.last_error
    return store.id, done.id


async def test_upload_then_file_search_with_the_sdk_streamed_and_not() -> None:
    queries = ["Norway shipping", "shipping cost", "Norway", "delivery time"]  # searched at once
    model = Switch(call("msearch", {"queries": queries}, ns="file_search"),
                   ("File search results", answer(CITE)))
    async with served(model) as (c, app):
        assert app.state.responses.knowledge is app.state.knowledge
        client = sdk(c)
        store_id, file_id = await _store(client)
        tool = {"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 3}
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input="What does shipping to Norway cost?", tools=[tool],  # type: ignore[list-item]
            include=["file_search_call.results"])
        streamed = await c.post("/v1/responses", json={"model": MODEL, "input": "Norway?", "tools": [tool],
                                                       "stream": True})
    validate_response(raw.http_response.json())
    r = raw.parse()
    fs = next(i for i in r.output if i.type == "file_search_call")
    assert fs.status == "completed" and fs.results is not None and fs.queries == queries
    assert [(x.file_id, x.filename) for x in fs.results] == [(file_id, "faq.md")]
    assert "12 EUR" in (fs.results[0].text or "")
    note = r.output[-1].content[0].annotations[0]  # type: ignore[union-attr]
    assert (note.type, note.file_id, note.filename, note.index) == (  # type: ignore[union-attr]
        "file_citation", file_id, "faq.md", CITE.index("【0:0"))
    assert "Shipping to Norway costs 12 EUR" in model.prompts[1]
    final = check_stream([e for e in sse_payloads(streamed.text) if e != "[DONE]"])
    assert [i["type"] for i in final["output"]] == ["reasoning", "file_search_call", "message"]


async def test_another_keys_store_is_the_404_of_a_missing_one() -> None:
    model = Switch(answer("x"))
    async with served(model) as (c, _):
        store_id, _ = await _store(sdk(c))
        theirs = await c.post("/v1/responses", headers=BOB, json={"model": MODEL, "input": "x", "tools": [
            {"type": "file_search", "vector_store_ids": [store_id]}]})
        missing = await c.post("/v1/responses", headers=BOB, json={"model": MODEL, "input": "x", "tools": [
            {"type": "file_search", "vector_store_ids": ["vs_doesnotexist00000000000"]}]})
        malformed = {"type": "and", "filters": 3}
        bad_filter = await c.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": [
            {"type": "file_search", "vector_store_ids": [store_id], "filters": malformed}]})
    assert theirs.status_code == missing.status_code == 404, theirs.text
    validate_error_body(theirs.json())
    assert theirs.json()["error"]["param"] == missing.json()["error"]["param"]
    assert theirs.json()["error"]["param"] == "tools[0].vector_store_ids[0]"
    assert theirs.text.replace(store_id, "ID") == missing.text.replace("vs_doesnotexist00000000000", "ID")
    assert bad_filter.status_code == 400, bad_filter.text
    assert bad_filter.json()["error"]["param"].startswith("tools[0].filters")
    assert model.prompts == []


async def test_the_agents_sdk_file_search_tool() -> None:
    """The OpenAI Agents SDK's ``FileSearchTool`` (with ``include_search_results``) against the
    gateway: the run's items include the call, the answer carries the citation."""
    from agents import Agent, FileSearchTool, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel

    set_tracing_disabled(True)  # the SDK would export traces to api.openai.com
    model = Switch(call("msearch", {"queries": ["Norway shipping"]}, ns="file_search"),
                   ("File search results", answer(CITE)))
    async with served(model) as (c, _):
        client = sdk(c)
        store_id, file_id = await _store(client)
        agent = Agent(name="support", instructions="Answer from the files.",
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                      tools=[FileSearchTool(vector_store_ids=[store_id], max_num_results=2,
                                            include_search_results=True)])
        result = await Runner.run(agent, "What does shipping to Norway cost?",
                                  run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == CITE
    calls = [i.raw_item for i in result.new_items if getattr(i.raw_item, "type", "") == "file_search_call"]
    assert len(calls) == 1 and calls[0].results is not None  # type: ignore[union-attr]
    assert [r.file_id for r in calls[0].results] == [file_id]  # type: ignore[union-attr]
