"""Events → Open Responses: semantic streaming events and the response resource.

One stateful :class:`ResponsesEncoder` per response.  Streaming sends every event
it returns; a non-streaming answer runs the same encoder and returns
:meth:`ResponsesEncoder.resource` at the end, so the final object is by
construction the fold of the events.  Item mapping:

* reasoning → ``reasoning`` item with one ``reasoning_text`` content part
  (``response.reasoning.delta`` / ``.done``; OpenAI's SDKs get ``response.reasoning_text.*``,
  see :mod:`app.api.responses.dialect`), and its sealed ``encrypted_content`` when the
  request includes ``reasoning.encrypted_content``; with ``reasoning.summary`` one
  ``summary_text`` part too (``response.reasoning_summary_part.*`` /
  ``response.reasoning_summary_text.*``, :mod:`app.api.responses.summary`): ``auto`` and
  ``detailed`` stream the reasoning itself as its summary, ``concise`` gives a bounded excerpt
  when the reasoning ends; no second generation is made;
* preamble → assistant ``message`` with ``phase: "commentary"``;
* final text → assistant ``message`` with ``phase: "final_answer"``;
* tool call → ``function_call`` item (``response.function_call_arguments.*``), with
  ``namespace`` for a function of a namespace tool; a ``custom`` tool's call →
  ``custom_tool_call`` (its ``input`` unwrapped from the arguments when complete,
  ``response.custom_tool_call_input.delta`` / ``.done``), see :mod:`app.api.responses.tools`;
* hosted MCP tools (:mod:`app.api.responses.hosted`): a listing → ``mcp_list_tools``
  (``response.mcp_list_tools.in_progress`` / ``.completed``) when the response starts; a call
  the gateway runs → ``mcp_call`` (``response.mcp_call.in_progress``,
  ``response.mcp_call_arguments.delta`` / ``.done``, then ``response.mcp_call.completed`` or
  ``.failed`` with its ``output`` / ``error`` once it ran); a call awaiting the client's
  approval → ``mcp_approval_request``.
* web search (:mod:`app.tools.web`): a browser call → ``web_search_call``, added once its
  arguments are complete (``response.web_search_call.in_progress`` / ``.searching``), done
  when it has run (``.completed``); its ``action`` is the tool's own account, its sources only
  with ``include``.  An answer naming a URL the search showed gets ``url_citation``
  annotations (``response.output_text.annotation.added``).
* file search (:mod:`app.tools.file_search`): an ``msearch`` call → ``file_search_call``, added
  once its arguments are complete (``.in_progress`` / ``.searching``, then ``.completed``); an
  answer citing a result gets a ``file_citation`` annotation.
* code interpreter (:mod:`app.tools.code`): a ``python`` call → ``code_interpreter_call``
  (``.in_progress``, ``response.code_interpreter_call_code.delta`` / ``.done`` with the whole
  code, ``.interpreting``, then ``.completed`` with its ``logs`` output).

Every item and content part reaches a terminal status; ``sequence_number`` counts
from 0 without gaps.  ``wire=True``: the plain text, reasoning and function-argument deltas
leave pre-encoded (:mod:`app.api.responses.wire`), byte for byte their events' frames, an
item's consecutive ones joined in one payload while it waits for the SSE sender.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.api.logprobs import logprobs_content
from app.api.responses.dialect import OPEN_RESPONSES, EventDialect
from app.api.responses.hosted_items import HostedItems
from app.api.responses.summary import done as summary_done
from app.api.responses.summary import part_added as summary_added
from app.api.responses.tools import WireTool
from app.api.responses.wire import WIRE_EVENTS, Deltas, ItemFrame, delta_frames, piece
from app.core import events as ev
from app.core.errors import error_fields
from app.core.ids import random_id
from app.core.output import Usage
from app.items.names import custom_input

Json = dict[str, Any]
DEFERRED = ("web_search", "code_interpreter", "file_search")  # items added once their arguments are whole


def usage_body(usage: Usage) -> Json:
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens}}


@dataclass
class _Open:
    """The output item currently being streamed."""

    kind: str  # "reasoning" | "preamble" | "text" | "tool" | "custom"
    index: int
    item: Json
    text: list[str] = field(default_factory=list)
    logprobs: list[Json] = field(default_factory=list)
    summary_open: bool = False
    frame: ItemFrame | None = None  # wire: its deltas' frame, cut (wire.py)
    wire: type[object] | None = None  # wire: the event whose deltas take that frame (its fast path)


class ResponsesEncoder:
    def __init__(self, resource: Json, dialect: EventDialect = OPEN_RESPONSES,
                 seal: Callable[[str], str] | None = None,
                 tools: Mapping[str, WireTool] | None = None, summary: str | None = None,
                 list_items: Sequence[Json] = (), cite: Callable[[str], list[Json]] | None = None,
                 sources: bool = False, container_id: str = "", results: bool = False,
                 wire: bool = False) -> None:
        """``resource``: the response object as created (status ``in_progress``, empty output);
        ``dialect``: the event names the client parses (:mod:`app.api.responses.dialect`);
        ``seal``: set with ``include: ["reasoning.encrypted_content"]``, it makes a finished
        reasoning item's ``encrypted_content`` from its text; ``tools``: model-facing tool
        names → the wire shape of their calls (a name not in it is a plain function);
        ``summary``: the request's ``reasoning.summary``; ``list_items``: ``mcp_list_tools``
        items to emit first; ``cite``: web search's citations of an answer's text
        (:meth:`~app.tools.web.WebSearchToolbox.citations`: ``url_citation`` annotations);
        ``sources``: ``web_search_call`` actions keep
        their sources (``include: ["web_search_call.action.sources"]``); ``container_id``: the
        code interpreter's container of this response; ``results``: ``file_search_call`` items
        keep their results (``include: ["file_search_call.results"]``)."""
        self._resource = resource
        self._dialect = dialect
        self._seal = seal
        self._tools = tools or {}
        self._summary = summary
        self._seq = 0
        self._open: _Open | None = None
        self._hosted = HostedItems(self._event, resource["output"], list_items, sources, container_id,
                                   results)
        self._cite = cite
        self._wire = wire  # deltas as pre-encoded frames (a stream only its SSE response reads)
        self._pending: Deltas | None = None  # wire: the last deltas returned, while not yet taken
        self.terminal = False

    # -- helpers ------------------------------------------------------------------
    def _event(self, type_: str, **fields: Any) -> Json:
        event = {"type": type_, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def resource(self) -> Json:
        return self._resource

    def snapshot(self) -> Json:
        return {**self._resource, "output": list(self._resource["output"])}

    def result(self) -> Json:
        """The non-streaming body: the resource every encoded event has updated."""
        return self._resource

    def start(self) -> list[Json]:
        """The run started generating (a queued background response is now in progress)."""
        self._resource["status"] = "in_progress"
        events = [self._event("response.created", response=self.snapshot()),
                  self._event("response.in_progress", response=self.snapshot())]
        return events + self._hosted.listings()

    def _add_item(self, kind: str, item: Json) -> list[Json]:
        index = len(self._resource["output"])
        self._open = _Open(kind, index, item)
        self._resource["output"].append(item)
        events = [self._event("response.output_item.added", output_index=index, item=dict(item))]
        part = self._part(kind, "")
        if part is not None:
            item["content"] = []
            events[0]["item"] = {**item, "content": []}
            events.append(self._event("response.content_part.added", item_id=item["id"],
                                      output_index=index, content_index=0, part=part))
        return events

    @staticmethod
    def _part(kind: str, text: str, logprobs: list[Json] | None = None) -> Json | None:
        if kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        if kind in ("preamble", "text"):
            part: Json = {"type": "output_text", "text": text, "annotations": []}
            if logprobs is not None:
                part["logprobs"] = logprobs
            return part
        return None

    def _open_item(self, kind: str, **extra: Any) -> list[Json]:
        if self._open is not None and self._open.kind == kind and kind in ("reasoning", "preamble", "text"):
            return []
        events = self._close("completed")
        if kind == "reasoning":
            item: Json = {"id": random_id("rs_"), "type": "reasoning", "status": "in_progress",
                          "summary": []}
        elif kind == "tool":
            tool = self._tools.get(extra["name"])
            item = {"id": random_id("fc_"), "type": "function_call", "status": "in_progress",
                    "call_id": extra["call_id"], "name": tool.name if tool else extra["name"],
                    "arguments": ""}
            if tool is not None and tool.namespace:
                item["namespace"] = tool.namespace
        elif kind == "custom":
            tool = self._tools[extra["name"]]
            item = {"id": random_id("ctc_"), "type": "custom_tool_call", "status": "in_progress",
                    "call_id": extra["call_id"], "name": tool.name, "input": ""}
            if tool.namespace:
                item["namespace"] = tool.namespace
        elif kind in ("mcp", "mcp_approval"):
            tool = self._tools[extra["name"]]
            item = ({"id": random_id("mcp_"), "type": "mcp_call", "status": "in_progress",
                     "server_label": tool.namespace, "name": tool.name, "arguments": ""} if kind == "mcp" else
                    {"id": random_id("mcpr_"), "type": "mcp_approval_request", "server_label": tool.namespace,
                     "name": tool.name, "arguments": ""})
            if extra.get("approval"):
                item["approval_request_id"] = extra["approval"]
            index = len(self._resource["output"])
            events += self._add_item(kind, item)
            if kind == "mcp":
                events += self._hosted.mcp_opened(extra["call_id"], index, item)
            return events
        else:
            item = {"id": random_id("msg_"), "type": "message", "status": "in_progress",
                    "role": "assistant", "phase": "commentary" if kind == "preamble" else "final_answer"}
        return events + self._add_item(kind, item)

    def _close(self, status: str) -> list[Json]:
        cur, self._open = self._open, None
        if cur is None:
            return []
        item, idx, text = cur.item, cur.index, "".join(cur.text)
        events: list[Json] = []
        if cur.kind in DEFERRED:
            if status != "completed":
                return []
            if cur.kind == "code_interpreter":
                return self._hosted.code_added(item["call_id"], text)
            if cur.kind == "file_search":
                return self._hosted.files_added(item["call_id"], text)
            return self._hosted.web_added(item["call_id"], item["name"], text)
        if cur.kind == "tool":
            item["arguments"] = text
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=idx, arguments=text))
        elif cur.kind in ("mcp", "mcp_approval"):
            item["arguments"] = text
            if cur.kind == "mcp":  # the item stays open until the call has run (HostedCallDone)
                events.append(self._event("response.mcp_call_arguments.done", item_id=item["id"],
                                          output_index=idx, arguments=text))
                if status == "completed":
                    return events
                self._hosted.forget(item)
        elif cur.kind == "custom":  # the input exists only once the arguments are complete
            item["input"] = value = custom_input(text)
            if value:
                events.append(self._event("response.custom_tool_call_input.delta", item_id=item["id"],
                                          output_index=idx, delta=value))
            events.append(self._event("response.custom_tool_call_input.done", item_id=item["id"],
                                      output_index=idx, input=value))
        else:
            logprobs = cur.logprobs if cur.kind == "text" else None
            part = self._part(cur.kind, text, logprobs)
            if part is not None and cur.kind == "text" and self._cite is not None:
                part["annotations"] = notes = self._cite(text)
                events += [self._event("response.output_text.annotation.added", item_id=item["id"],
                                       output_index=idx, content_index=0, annotation_index=n, annotation=a)
                           for n, a in enumerate(notes)]
            done = self._dialect.reasoning_done if cur.kind == "reasoning" else "response.output_text.done"
            extra = {"logprobs": logprobs} if logprobs is not None else {}
            events.append(self._event(done, item_id=item["id"], output_index=idx, content_index=0,
                                      text=text, **extra))
            events.append(self._event("response.content_part.done", item_id=item["id"],
                                      output_index=idx, content_index=0, part=part))
            item["content"] = [part]
            if cur.kind == "reasoning" and self._summary is not None and text:
                events += summary_done(self._event, self._summary, item, idx, text)
            if cur.kind == "reasoning" and self._seal is not None:
                item["encrypted_content"] = self._seal(text)
        item["status"] = status
        events.append(self._event("response.output_item.done", output_index=idx, item=dict(item)))
        return events

    def _delta(self, text: str, logprobs: list[Json] | None = None) -> list[Json]:
        cur = self._open
        assert cur is not None
        cur.text.append(text)
        if cur.kind in ("custom", "mcp_approval", *DEFERRED):  # no deltas on the wire
            return []
        item_id, idx = cur.item["id"], cur.index
        if self._wire and not logprobs and cur.kind != "mcp" and (
                cur.kind != "reasoning" or self._summary not in ("auto", "detailed")):
            if cur.frame is None:
                cur.frame = delta_frames(cur.kind, item_id, idx, self._dialect.reasoning_delta)
                cur.wire = WIRE_EVENTS[cur.kind]
            self._seq += 1
            return [Deltas(cur.frame[0], piece(cur.frame[1], self._seq - 1, text))]
        if cur.kind == "tool":
            return [self._event("response.function_call_arguments.delta", item_id=item_id,
                                output_index=idx, delta=text)]
        if cur.kind == "mcp":
            return [self._event("response.mcp_call_arguments.delta", item_id=item_id, output_index=idx,
                                delta=text)]
        if cur.kind == "reasoning":
            events = [self._event(self._dialect.reasoning_delta, item_id=item_id, output_index=idx,
                                  content_index=0, delta=text)]
            if self._summary in ("auto", "detailed"):  # the reasoning is its own summary, live
                if not cur.summary_open:
                    cur.summary_open = True
                    events.append(summary_added(self._event, cur.item, idx))
                events.append(self._event("response.reasoning_summary_text.delta", item_id=item_id,
                                          output_index=idx, summary_index=0, delta=text))
            return events
        cur.logprobs.extend(logprobs or [])
        return [self._event("response.output_text.delta", item_id=item_id, output_index=idx,
                            content_index=0, delta=text, logprobs=logprobs or [])]

    # -- the mapping --------------------------------------------------------------
    def encode(self, event: ev.Event) -> list[Json]:
        if self.terminal:
            return []
        cur = self._open
        if cur is not None and type(event) is cur.wire:  # the open item's next plain delta
            text = (event.delta if isinstance(event, ev.ToolCallArgumentsDelta) else
                    None if isinstance(event, ev.TextDelta) and event.logprobs else
                    getattr(event, "text", None))
            if text is not None and cur.frame is not None:  # what _delta does, without the ifs
                cur.text.append(text)
                cut, middle = cur.frame
                seq = self._seq
                self._seq = seq + 1
                pending = self._pending  # joined to the item's deltas not yet taken (wire.py)
                if pending is not None and pending.cut is cut and not pending.taken:
                    pending.pieces.append(piece(middle, seq, text))
                    return []
                self._pending = Deltas(cut, piece(middle, seq, text))
                return [self._pending]
        self._pending = None
        if isinstance(event, ev.ReasoningDelta):
            return self._open_item("reasoning") + self._delta(event.text)
        if isinstance(event, ev.PreambleDelta):
            return self._open_item("preamble") + self._delta(event.text)
        if isinstance(event, ev.TextDelta):
            top = int(self._resource.get("top_logprobs") or 0)
            lps = logprobs_content(event.logprobs, top) if event.logprobs else None
            return self._open_item("text") + self._delta(event.text, lps)
        if isinstance(event, ev.PartDone):
            return self._close("completed")
        if isinstance(event, ev.ToolCallStarted):
            tool = self._tools.get(event.name)
            kind = "tool" if tool is None or tool.kind == "function" else tool.kind
            if kind in DEFERRED:  # announced once its arguments are whole
                events = self._close("completed")
                self._open = _Open(kind, -1, {"call_id": event.call_id, "name": event.name})
                return events
            return self._open_item(kind, call_id=event.call_id, name=event.name)
        if isinstance(event, ev.HostedCallStarted):  # an approved call: its arguments are whole
            events = self._open_item("mcp", call_id=event.call_id, name=event.name, approval=event.approval)
            return events + self._delta(event.arguments) + self._close("completed")
        if isinstance(event, ev.HostedCallDone):
            return self._hosted.done(event)
        if isinstance(event, ev.ToolCallArgumentsDelta):
            return self._delta(event.delta)
        if isinstance(event, ev.ToolCallDone):
            return self._close("completed")
        if isinstance(event, ev.Finished):
            return self.finish(event)
        if isinstance(event, ev.Error):
            return self.fail(event)
        return []

    def finish(self, event: ev.Finished) -> list[Json]:
        incomplete = event.reason in ("length", "content_filter")
        events = self._close("incomplete" if incomplete else "completed") + self._hosted.drop()
        r = self._resource
        r["status"] = "incomplete" if incomplete else "completed"
        reason = "content_filter" if event.reason == "content_filter" else event.limit or "max_output_tokens"
        r["incomplete_details"] = {"reason": reason} if incomplete else None
        r["completed_at"] = int(time.time()) if not incomplete else None
        r["usage"] = usage_body(event.usage)
        self.terminal = True
        name = "response.incomplete" if incomplete else "response.completed"
        return [*events, self._event(name, response=self.snapshot())]

    def fail(self, error: ev.Error) -> list[Json]:
        events = self._close("incomplete") + self._hosted.drop()
        r = self._resource
        r["status"] = "failed"
        r["error"] = {"code": error.code, "message": error.message}
        self.terminal = True
        payload = error_fields(error.message, error.type, error.code, error.param)
        # OpenAI's flat event: code, message, param beside type "error" (the error's own type
        # stays in the nested object only).
        flat = {k: v for k, v in payload.items() if k != "type"} if self._dialect.flat_error else {}
        return [*events, self._event("error", **flat, error=payload),
                self._event("response.failed", response=self.snapshot())]

    def unstored(self, error: ev.Error, held: list[Json]) -> list[Json]:
        """The run's end could not be stored: what replaces the ``held`` payloads of its end
        (never sent): the same, but its terminal event (the last one encoded) becomes
        ``error`` and ``response.failed`` with that error."""
        held = held[:-1]
        self._seq -= 1
        r = self._resource
        r["status"], r["completed_at"] = "failed", None
        r["error"] = {"code": error.code, "message": error.message}
        payload = error_fields(error.message, error.type, error.code, error.param)
        flat = {k: v for k, v in payload.items() if k != "type"} if self._dialect.flat_error else {}
        return [*held, self._event("error", **flat, error=payload),
                self._event("response.failed", response=self.snapshot())]

    def cancel(self) -> list[Json]:
        """The response was cancelled: close what is open, status ``cancelled``."""
        self._pending = None
        events = self._close("incomplete") + self._hosted.drop()
        self._resource["status"] = "cancelled"
        self.terminal = True
        return [*events, self._event("response.failed", response=self.snapshot())]
