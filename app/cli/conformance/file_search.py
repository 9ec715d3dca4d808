"""The Open Responses suite's optional ``file-search`` case, and the vector store it needs.

The suite's request (``src/lib/compliance-tests.ts``): a ``file_search`` tool on one vector
store, forced (``tool_choice: {"type": "file_search"}``), ``include:
["file_search_call.results"]``; it passes when the response has output and a
``file_search_call`` item.  The suite takes the store's id from its configuration
(``--file-search-vector-store ID`` here).  Without one the run makes its own
(:func:`prepare`): it uploads a one-sentence text file (``POST /files``, purpose
``assistants``), creates a store with it (``POST /vector_stores``), waits for the ingestion
(at most ``--timeout`` seconds), and then checks the store searches **by meaning**: a query
sharing no word with the sentence must find it, which a keyword-only store (a server without
an embedding model) cannot.  When any of that is not there — no Files or vector stores API,
ingestion failed, no embedding model — the case is reported *skipped* (not applicable) with
the reason; what the run made is deleted afterwards, whatever happened.

Schema verdict: the Open Responses document defines neither the ``file_search`` tool nor its
item, so the response is validated without them (a forced hosted ``tool_choice`` read as
``"required"``, ``file_citation`` annotations left out: the document has only
``url_citation``), and the ``file_search_call`` items and the messages with a
``file_citation`` with the OpenAI SDK's types, as ``offline-web-search`` does.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from app.cli.conformance.runner import Check
from app.cli.conformance.transport import Client

Json = dict[str, Any]

PASSAGE = "The lighthouse keeper records the tide every morning at twenty to seven.\n"
PROBE = "ocean height noted daily"  # shares no word with PASSAGE: only a vector search finds it
FILENAME = "ocm-conformance-lighthouse.txt"
ABSENT = (404, 405, 501)  # the server has no such endpoint
POLL_SECONDS = 0.25


class NotApplicable(Exception):
    """The server cannot give the case a vector store; the message says why."""


class Prepared:
    """The vector store the case searches, and what the run made to get it (deleted by
    :meth:`cleanup`)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.store_id: str | None = None
        self.made: list[str] = []  # paths to DELETE, the store before its file

    def cleanup(self) -> None:
        for path in self.made:
            with contextlib.suppress(Exception):  # best effort: the verdict does not depend on it
                self.client.http.delete(self.client.base_url + path)
        self.made = []


def _json(response: Any) -> Json:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _answer(response: Any, what: str) -> Json:
    """The JSON of a 2xx answer; any other answer makes the case not applicable."""
    if response.status_code in ABSENT:
        raise NotApplicable(f"Not applicable: the server has no {what} (HTTP {response.status_code})")
    if response.status_code >= 300:
        raise NotApplicable(f"Not applicable: the server could not make a vector store: {what} "
                            f"answered HTTP {response.status_code}: {response.text[:160]}")
    return _json(response)


def prepare(client: Client, prepared: Prepared) -> str:
    """Upload the passage, make a vector store of it, wait for it and check it searches by
    meaning; returns the store's id or raises :class:`NotApplicable`.  Transport errors (the
    server is unreachable) propagate: the case then fails, as every other case does."""
    base, http = client.base_url, client.http
    uploaded = _answer(http.post(f"{base}/files", data={"purpose": "assistants"},
                                 files={"file": (FILENAME, PASSAGE.encode(), "text/plain")}), "Files API")
    file_id = str(uploaded.get("id") or "")
    if not file_id:
        raise NotApplicable("Not applicable: the Files API answered no file id")
    prepared.made.append(f"/files/{file_id}")
    store = _answer(http.post(f"{base}/vector_stores", json={"name": "ocm-conformance file-search",
                                                             "file_ids": [file_id]}),
                    "vector stores API")
    store_id = str(store.get("id") or "")
    if not store_id:
        raise NotApplicable("Not applicable: the vector stores API answered no store id")
    prepared.made.insert(0, f"/vector_stores/{store_id}")
    deadline = time.monotonic() + client.timeout
    while store.get("status") == "in_progress" or (store.get("file_counts") or {}).get("in_progress"):
        if time.monotonic() > deadline:
            raise NotApplicable(f"Not applicable: vector store {store_id} was still being ingested "
                                f"after {client.timeout:g} s")
        time.sleep(POLL_SECONDS)
        store = _answer(http.get(f"{base}/vector_stores/{store_id}"), "vector stores API")
    attached = _answer(http.get(f"{base}/vector_stores/{store_id}/files/{file_id}"), "vector stores API")
    if attached.get("status") != "completed":
        error = attached.get("last_error") or {}
        raise NotApplicable(f"Not applicable: the server could not ingest a text file "
                            f"({attached.get('status')}: {error.get('message', 'no last_error')})")
    found = _answer(http.post(f"{base}/vector_stores/{store_id}/search", json={"query": PROBE}),
                    "vector store search")
    if not any(isinstance(hit, dict) and hit.get("file_id") == file_id for hit in found.get("data") or []):
        raise NotApplicable("Not applicable: the server's vector stores do not search by meaning (a "
                            "query sharing no word with the file found nothing): it has no "
                            "embedding model")
    return store_id


def _file_citations(item: Json) -> bool:
    """Whether a message item has a ``file_citation`` annotation (OpenAI's; the document has
    only ``url_citation``)."""
    return item.get("type") == "message" and any(
        isinstance(a, dict) and a.get("type") == "file_citation"
        for part in item.get("content") or [] if isinstance(part, dict)
        for a in part.get("annotations") or [])


def _uncited(item: Json) -> Json:
    """A message item without its ``file_citation`` annotations (checked with OpenAI's types)."""
    if not _file_citations(item):
        return item
    content = [{**part, "annotations": [a for a in part.get("annotations") or []
                                        if not (isinstance(a, dict) and a.get("type") == "file_citation")]}
               if isinstance(part, dict) and "annotations" in part else part
               for part in item.get("content") or []]
    return {**item, "content": content}


def request(model: str, store_id: str) -> Json:
    """The suite's request."""
    return {"model": model,
            "input": "Search the configured vector store for relevant content and summarize one result.",
            "tools": [{"type": "file_search", "vector_store_ids": [store_id]}],
            "tool_choice": {"type": "file_search"}, "include": ["file_search_call.results"]}


def run(ctx: Any, check: Check) -> None:
    """The ``file-search`` case (``ctx``: :class:`app.cli.conformance.responses.Context`)."""
    from app.cli.conformance.responses import has_output, has_type, hosted_items_typed

    prepared = Prepared(ctx.client)
    try:
        store_id = ctx.file_search_store
        if store_id is None:
            try:
                store_id = prepare(ctx.client, prepared)
            except NotApplicable as exc:
                check.skip_reason = str(exc)
                return
        ex = ctx.client.post("/responses", request(ctx.model, store_id))
        if not check.expect(ex.status == 200, f"HTTP {ex.status}: {ex.text[:200]}"):
            return
        r = ex.body if isinstance(ex.body, dict) else {}
        output = [i for i in r.get("output") or [] if isinstance(i, dict)]
        hosted = [i for i in output if i.get("type") == "file_search_call"]
        cited = [i for i in output if _file_citations(i)]
        tools = [t for t in r.get("tools") or []
                 if not (isinstance(t, dict) and t.get("type") == "file_search")]
        standard = {**r, "output": [_uncited(i) for i in output if i not in hosted], "tools": tools}
        if isinstance(r.get("tool_choice"), dict) and r["tool_choice"].get("type") == "file_search":
            standard["tool_choice"] = "required"  # a hosted choice the document has no schema for
        check.schema("ResponseResource", standard)
        hosted_items_typed(check, [*hosted, *cited])
        has_output(check, r)
        has_type(check, r, "file_search_call")
    finally:
        prepared.cleanup()
