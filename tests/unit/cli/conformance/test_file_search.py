"""The ``file-search`` case (app/cli/conformance/file_search.py) against a scripted server
(``httpx.MockTransport``): when it is not applicable and why, what it deletes, the suite's
request, and the schema verdict around what the Open Responses document does not define."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.cli.conformance import file_search, responses
from app.cli.conformance.runner import Result, run_case
from app.cli.conformance.transport import Client

Json = dict[str, Any]
CASE = next(c for c in responses.cases() if c.id == "file-search")


class Server:
    """A server that answers each ``METHOD path`` with a scripted (status, body); it records
    every request."""

    def __init__(self, routes: dict[str, tuple[int, Any] | Callable[[httpx.Request], tuple[int, Any]]]):
        self.routes = routes
        self.seen: list[str] = []
        self.bodies: dict[str, Any] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = f"{request.method} {request.url.path.removeprefix('/v1')}"
        self.seen.append(key)
        if request.headers.get("content-type", "").startswith("application/json"):
            self.bodies[key] = json.loads(request.content)
        route = self.routes.get(key, (404, {"error": {"message": "no such route"}}))
        status, body = route(request) if callable(route) else route
        return httpx.Response(status, json=body)


def _context(server: Server, store: str | None = None) -> responses.Context:
    client = Client("http://gw/v1", None, timeout=5)
    client.http = httpx.Client(transport=httpx.MockTransport(server))
    return responses.Context(client, "m", file_search_store=store)


UPLOAD = {"POST /files": (200, {"id": "file-1", "object": "file"})}
STORE = {"POST /vector_stores": (200, {"id": "vs_1", "status": "completed",
                                       "file_counts": {"in_progress": 0}})}
ATTACHED = {"GET /vector_stores/vs_1/files/file-1": (200, {"id": "file-1", "status": "completed"})}
FOUND = {"POST /vector_stores/vs_1/search": (200, {"data": [{"file_id": "file-1", "score": 0.4}]})}
DELETES = {"DELETE /vector_stores/vs_1": (200, {}), "DELETE /files/file-1": (200, {})}


def _answer(*items: Json, tool_choice: Any = None) -> Json:
    return {"id": "resp_1", "object": "response", "created_at": 1, "completed_at": 2, "status": "completed",
            "incomplete_details": None, "model": "m", "previous_response_id": None, "instructions": None,
            "output": list(items), "error": None,
            "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
            "tool_choice": tool_choice or {"type": "file_search"}, "truncation": "disabled",
            "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1,
            "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0, "temperature": 1,
            "reasoning": {"effort": None, "summary": None}, "max_output_tokens": None, "max_tool_calls": None,
            "store": True, "background": False, "service_tier": "default", "metadata": {},
            "safety_identifier": None, "prompt_cache_key": None,
            "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


CALL = {"id": "fs_1", "type": "file_search_call", "status": "completed", "queries": ["tide"],
        "results": [{"file_id": "file-1", "filename": "a.txt", "score": 0.5, "text": "t", "attributes": {}}]}
MESSAGE = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", "content": [
    {"type": "output_text", "text": "At 6:40 【0:0†a.txt】.", "annotations": [
        {"type": "file_citation", "file_id": "file-1", "filename": "a.txt", "index": 8}]}]}


def _run(case: Any, ctx: responses.Context) -> Result:
    return run_case(case, ctx)


def test_no_files_api_is_not_applicable_and_nothing_is_left_behind() -> None:
    server = Server({})
    result = _run(CASE, _context(server))
    assert result.status == "skipped" and result.reasons == [
        "Not applicable: the server has no Files API (HTTP 404)"]
    assert server.seen == ["POST /files"]


def test_no_vector_stores_api_deletes_the_upload() -> None:
    server = Server({**UPLOAD, "DELETE /files/file-1": (200, {})})
    result = _run(CASE, _context(server))
    assert result.status == "skipped" and "no vector stores API (HTTP 404)" in result.reasons[0]
    assert server.seen == ["POST /files", "POST /vector_stores", "DELETE /files/file-1"]
    assert server.bodies["POST /vector_stores"]["file_ids"] == ["file-1"]


def test_a_failed_ingestion_says_why() -> None:
    failed = {"GET /vector_stores/vs_1/files/file-1": (200, {"status": "failed", "last_error": {
        "code": "server_error", "message": "the embedding model is down"}})}
    server = Server({**UPLOAD, **STORE, **failed, **DELETES})
    result = _run(CASE, _context(server))
    assert result.status == "skipped"
    assert result.reasons == ["Not applicable: the server could not ingest a text file "
                              "(failed: the embedding model is down)"]
    assert server.seen[-2:] == ["DELETE /vector_stores/vs_1", "DELETE /files/file-1"]


def test_ingestion_is_waited_for() -> None:
    polls = iter([(200, {"id": "vs_1", "status": "in_progress"}),
                  (200, {"id": "vs_1", "status": "completed"})])
    answer = _answer(CALL)
    server = Server({**UPLOAD, "POST /vector_stores": (200, {"id": "vs_1", "status": "in_progress"}),
                     "GET /vector_stores/vs_1": lambda _: next(polls), **ATTACHED, **FOUND, **DELETES,
                     "POST /responses": (200, answer)})
    result = _run(CASE, _context(server))
    assert result.status == "passed", result.reasons
    assert server.seen.count("GET /vector_stores/vs_1") == 2


def test_a_keyword_only_store_means_no_embedding_model() -> None:
    """The probe shares no word with the file: only a search by meaning finds it."""
    server = Server({**UPLOAD, **STORE, **ATTACHED, **DELETES,
                     "POST /vector_stores/vs_1/search": (200, {"data": []})})
    result = _run(CASE, _context(server))
    assert result.status == "skipped" and "it has no embedding model" in result.reasons[0]
    probe = server.bodies["POST /vector_stores/vs_1/search"]["query"]
    assert not set(probe.lower().split()) & set(file_search.PASSAGE.lower().rstrip(".\n").split())
    assert "POST /responses" not in server.seen


def test_the_suites_request_on_a_made_store_and_the_verdicts() -> None:
    server = Server({**UPLOAD, **STORE, **ATTACHED, **FOUND, **DELETES,
                     "POST /responses": (200, _answer(CALL, MESSAGE))})
    result = _run(CASE, _context(server))
    assert (result.status, result.suite, result.schema) == ("passed", "pass", "pass"), result.reasons
    assert server.bodies["POST /responses"] == file_search.request("m", "vs_1") == {
        "model": "m",
        "input": "Search the configured vector store for relevant content and summarize one result.",
        "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
        "tool_choice": {"type": "file_search"}, "include": ["file_search_call.results"]}
    assert server.seen[-2:] == ["DELETE /vector_stores/vs_1", "DELETE /files/file-1"]


@pytest.mark.parametrize(("output", "problem"), [
    ((MESSAGE,), "Expected output item of type 'file_search_call' but none found"),
    ((), "Response has no output items"),
])
def test_a_response_without_the_call_fails(output: tuple[Json, ...], problem: str) -> None:
    server = Server({"POST /responses": (200, _answer(*output))})
    result = _run(CASE, _context(server, store="vs_given"))
    assert result.status == "failed" and problem in result.reasons
    assert server.seen == ["POST /responses"]  # a given store: nothing made, nothing deleted


@pytest.mark.parametrize("bad", [
    {**CALL, "status": "bogus"},  # checked with OpenAI's types
    {**MESSAGE, "content": [{**MESSAGE["content"][0], "annotations": [{"type": "file_citation"}]}]},
    {**MESSAGE, "content": [{"type": "output_text", "annotations": []}]},  # the document's schema
])
def test_the_schema_verdict_fails_on_a_bad_item(bad: Json) -> None:
    output = [bad] if bad["type"] == "file_search_call" else [CALL, bad]
    server = Server({"POST /responses": (200, _answer(*output))})
    result = _run(CASE, _context(server, store="vs_given"))
    assert (result.status, result.suite, result.schema) == ("failed", "pass", "fail"), result.reasons


def test_an_error_status_fails() -> None:
    server = Server({"POST /responses": (404, {"error": {"message": "Vector store vs_given not found"}})})
    result = _run(CASE, _context(server, store="vs_given"))
    assert result.status == "failed" and result.reasons[0].startswith("HTTP 404")
