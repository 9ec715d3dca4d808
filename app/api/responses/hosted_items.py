"""The hosted-tool part of :class:`~app.api.responses.encode.ResponsesEncoder`: the items of
tools the gateway runs, which stay open while the tool runs.

* ``mcp_list_tools`` items, emitted whole when the response starts;
* an ``mcp_call`` opened by the encoder (its arguments stream as deltas) waits here for its
  result: ``response.mcp_call.completed`` or ``.failed`` with ``output`` / ``error`` (OpenAI's
  structured ``McpToolCallError``: :func:`app.tools.mcp.failure`);
* a ``web_search_call`` is added only once the model's arguments are complete (its
  ``action`` needs them): ``response.web_search_call.in_progress`` and ``.searching``, then
  ``.completed`` with the action the tool reports (its sources only with ``include``) and
  the text the model read (``ocm:output``; a failed call's ``ocm:error``);
* a ``file_search_call`` likewise (its ``queries`` are the model's arguments):
  ``response.file_search_call.in_progress`` and ``.searching``, then ``.completed`` with the
  queries run, the ``results`` only with ``include: ["file_search_call.results"]``, and the
  text the model read (``ocm:output``; a failed call's ``ocm:error``, status ``failed``);
* a ``code_interpreter_call`` likewise: its whole code (``..._code.delta`` / ``.done``), then
  ``.interpreting`` while it runs, ``.completed`` with its ``logs``, the pictures the code
  wrote as ``image`` outputs and every file it wrote in ``ocm:files`` (:mod:`app.tools.code`);
* whatever is still waiting when the response ends is closed ``incomplete``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.core import events as ev
from app.core.ids import random_id
from app.tools import code, file_search, mcp, web

Json = dict[str, Any]


class HostedItems:
    def __init__(self, emit: Callable[..., Json], output: list[Json], list_items: Sequence[Json],
                 sources: bool, container_id: str = "", results: bool = False) -> None:
        """``emit(type, **fields)`` numbers an event; ``output`` is the response's output list;
        ``sources`` / ``results``: web search's sources and file search's results are shown."""
        self._emit = emit
        self._output = output
        self._list_items = list_items
        self._sources = sources
        self._results = results
        self.container_id = container_id  # the response's code interpreter container
        self._pending: dict[str, tuple[int, Json]] = {}  # call id → (output index, item)

    def listings(self) -> list[Json]:
        events: list[Json] = []
        for listing in self._list_items:
            index = len(self._output)
            item = {**listing, "tools": []}
            self._output.append(item)
            at = {"item_id": item["id"], "output_index": index}
            events += [self._emit("response.output_item.added", output_index=index, item=dict(item)),
                       self._emit("response.mcp_list_tools.in_progress", **at)]
            item["tools"] = listing["tools"]
            events += [self._emit("response.mcp_list_tools.completed", **at),
                       self._emit("response.output_item.done", output_index=index, item=dict(item))]
        return events

    def mcp_opened(self, call_id: str, index: int, item: Json) -> list[Json]:
        self._pending[call_id] = (index, item)
        return [self._emit("response.mcp_call.in_progress", item_id=item["id"], output_index=index)]

    def forget(self, item: Json) -> None:
        """An ``mcp_call`` the encoder closed itself (its arguments never completed)."""
        self._pending = {k: v for k, v in self._pending.items() if v[1] is not item}

    def web_added(self, call_id: str, name: str, arguments: str) -> list[Json]:
        item = {"id": random_id("ws_"), "type": "web_search_call", "status": "in_progress",
                "action": web.action_of(name, arguments)}
        index = len(self._output)
        self._output.append(item)
        self._pending[call_id] = (index, item)
        return [self._emit("response.output_item.added", output_index=index, item=dict(item)),
                self._emit("response.web_search_call.in_progress", item_id=item["id"], output_index=index),
                self._emit("response.web_search_call.searching", item_id=item["id"], output_index=index)]

    def files_added(self, call_id: str, arguments: str) -> list[Json]:
        item: Json = {"id": random_id("fs_"), "type": "file_search_call", "status": "in_progress",
                      "queries": file_search.queries_of(arguments), "results": None}
        index = len(self._output)
        self._output.append(item)
        self._pending[call_id] = (index, item)
        at = {"item_id": item["id"], "output_index": index}
        events = [self._emit("response.output_item.added", output_index=index, item=dict(item)),
                  self._emit("response.file_search_call.in_progress", **at)]
        item["status"] = "searching"
        return [*events, self._emit("response.file_search_call.searching", **at)]

    def code_added(self, call_id: str, arguments: str) -> list[Json]:
        source = code.code_of(arguments)
        item: Json = {"id": random_id("ci_"), "type": "code_interpreter_call", "status": "in_progress",
                      "code": "", "container_id": self.container_id, "outputs": None}
        index = len(self._output)
        self._output.append(item)
        self._pending[call_id] = (index, item)
        at = {"item_id": item["id"], "output_index": index}
        events = [self._emit("response.output_item.added", output_index=index, item=dict(item)),
                  self._emit("response.code_interpreter_call.in_progress", **at),
                  self._emit("response.code_interpreter_call_code.delta", **at, delta=source),
                  self._emit("response.code_interpreter_call_code.done", **at, code=source)]
        item["code"] = source
        item["status"] = "interpreting"
        return [*events, self._emit("response.code_interpreter_call.interpreting", **at)]

    def done(self, event: ev.HostedCallDone) -> list[Json]:
        found = self._pending.pop(event.call_id, None)
        if found is None:
            return []
        index, item = found
        failed = event.error is not None
        if item["type"] == "code_interpreter_call":
            detail = event.detail or {}
            item["container_id"] = detail.get("container_id", item["container_id"])
            item["outputs"] = list(detail.get("outputs") or [])
            if detail.get("files"):
                item["ocm:files"] = list(detail["files"])
            item["status"] = "failed" if failed else "completed"
            events = [self._emit("response.code_interpreter_call.completed", item_id=item["id"],
                                 output_index=index)]
        elif item["type"] == "file_search_call":
            detail = event.detail or {}
            item["queries"] = list(detail.get("queries", item["queries"]))
            if self._results and not failed:
                item["results"] = list(detail.get("results") or [])
            item["status"] = "failed" if failed else "completed"
            if failed:
                item["ocm:error"] = event.error
            else:
                item["ocm:output"] = event.output
            events = [] if failed else [
                self._emit("response.file_search_call.completed", item_id=item["id"], output_index=index)]
        elif item["type"] == "web_search_call":
            action = dict((event.detail or {}).get("action") or item["action"])
            if not self._sources:
                action.pop("sources", None)
            item["action"] = action
            item["status"] = "failed" if failed else "completed"
            if failed:  # what the model read, so that a later turn re-renders it as it was
                item["ocm:error"] = event.error
            else:
                item["ocm:output"] = event.output
            events = [] if failed else [
                self._emit("response.web_search_call.completed", item_id=item["id"], output_index=index)]
        else:
            item["output"] = event.output if not failed else (event.output or None)
            error = (event.detail or {}).get("error")  # OpenAI's structured McpToolCallError
            item["error"] = (error or mcp.execution_error(event.error)) if event.error is not None else None
            item["status"] = "failed" if failed else "completed"
            events = [self._emit("response.mcp_call.failed" if failed else "response.mcp_call.completed",
                                 item_id=item["id"], output_index=index)]
        return [*events, self._emit("response.output_item.done", output_index=index, item=dict(item))]

    def drop(self) -> list[Json]:
        """Calls that will not run now (the response ended first)."""
        events: list[Json] = []
        for index, item in self._pending.values():
            item["status"] = "incomplete"
            events.append(self._emit("response.output_item.done", output_index=index, item=dict(item)))
        self._pending.clear()
        return events
