"""Validators for what ``/v1/responses`` emits, against the Open Responses OpenAPI document.

* :func:`validate_response`, :func:`validate_event`, :func:`validate_error_body` — JSON Schema
  (2020-12) validation against ``tests/fixtures/openresponses/openapi.json`` (2026-04-24).
* Hosted-tool items, tools and events that OpenAI's API defines and the Open Responses
  document does not (``mcp_*``, ``web_search_call``, ``file_search_call``,
  ``code_interpreter_call``; see issue 27: the gateway emits OpenAI's types for them, not
  implementor-prefixed ones), and messages / events carrying OpenAI's ``file_citation``
  annotation (the document knows only ``url_citation``), are validated with the OpenAI SDK's
  own types instead; everything else against the document.
* :func:`check_stream` — the stream-order rules of the spec: sequence numbers, SSE names,
  created / in_progress first, one terminal event last, per-item and per-content-part
  lifecycles, deltas that add up to their ``.done`` texts, terminal statuses, and a final
  response whose ``output`` equals the fold of the item events.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent, Tool
from pydantic import TypeAdapter
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

Json = dict[str, Any]
OPENAPI = Path(__file__).resolve().parent.parent / "fixtures" / "openresponses" / "openapi.json"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
DELTA_DONE = {"response.output_text.delta": "response.output_text.done",
              "response.reasoning.delta": "response.reasoning.done"}


@functools.cache
def _document() -> Json:
    doc: Json = json.loads(OPENAPI.read_text(encoding="utf-8"))
    return doc


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    doc = _document()
    registry: Registry = Registry().with_resource("urn:openresponses", Resource(doc, DRAFT202012))
    schema = {"$ref": f"urn:openresponses#/components/schemas/{name}"}
    return Draft202012Validator(schema, registry=registry)


def _validate(name: str, instance: Any) -> None:
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errors[:5]]
        raise AssertionError(f"{name} validation failed:\n" + "\n".join(lines))


@functools.cache
def _event_schemas() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, schema in _document()["components"]["schemas"].items():
        if name.endswith("StreamingEvent"):
            for type_ in schema.get("properties", {}).get("type", {}).get("enum", []):
                out[type_] = name
    return out


# (with OpenAI's custom and namespace tools and the custom tool calls, which the document
# does not define either)
HOSTED_ITEMS = ("mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response",
                "web_search_call", "file_search_call", "code_interpreter_call", "custom_tool_call")
HOSTED_TOOLS = ("mcp", "web_search", "web_search_preview", "code_interpreter", "file_search", "custom",
                "namespace")
HOSTED_EVENTS = ("response.mcp_", "response.web_search_call.", "response.file_search_call.",
                 "response.code_interpreter_call", "response.custom_tool_call_input.")
_OPENAI_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
_OPENAI_TOOL: TypeAdapter[Any] = TypeAdapter(Tool)
_OPENAI_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _openai(adapter: TypeAdapter[Any], value: Json) -> None:
    parsed = adapter.validate_python(value)
    assert getattr(parsed, "type", None) == value["type"], f"the SDK read {value['type']!r} as another type"


def _cites_files(value: Any) -> bool:
    return '"file_citation"' in json.dumps(value)


def _without_file_citations(item: Json) -> Json:
    """A message checked with the SDK's types, then without its ``file_citation`` annotations."""
    if item.get("type") != "message" or not _cites_files(item):
        return item
    _openai(_OPENAI_ITEM, item)
    content = [{**p, "annotations": [a for a in p["annotations"] if a.get("type") != "file_citation"]}
               if isinstance(p, dict) and isinstance(p.get("annotations"), list) else p
               for p in item.get("content") or []]
    return {**item, "content": content}


def _standard(body: Json) -> Json:
    """``body`` without its hosted-tool items and tools, which are checked with the SDK's types."""
    output, tools = body.get("output"), body.get("tools")
    rest = dict(body)
    if isinstance(output, list):
        hosted = [i for i in output if isinstance(i, dict) and i.get("type") in HOSTED_ITEMS]
        for item in hosted:
            _openai(_OPENAI_ITEM, item)
        rest["output"] = [_without_file_citations(i) if isinstance(i, dict) else i
                          for i in output if not any(i is h for h in hosted)]
    if isinstance(tools, list):
        hosted_tools = [t for t in tools if isinstance(t, dict) and t.get("type") in HOSTED_TOOLS]
        for tool in hosted_tools:
            _openai(_OPENAI_TOOL, tool)
        rest["tools"] = [t for t in tools if not any(t is h for h in hosted_tools)]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in HOSTED_TOOLS:  # OpenAI's hosted tool choice
        rest["tool_choice"] = "required"
    return rest


def validate_response(body: Json) -> None:
    _validate("ResponseResource", _standard(body))


def validate_event(event: Json) -> None:
    kind = str(event.get("type", ""))
    item = event.get("item")
    if kind.startswith(HOSTED_EVENTS) or (isinstance(item, dict) and item.get("type") in HOSTED_ITEMS) or (
            "response" not in event and _cites_files(event)):
        _openai(_OPENAI_EVENT, event)
        return
    name = _event_schemas().get(kind)
    if name is None:
        raise AssertionError(f"unknown streaming event type {event.get('type')!r}")
    if isinstance(event.get("response"), dict):
        event = {**event, "response": _standard(event["response"])}
    _validate(name, event)


def validate_error_body(body: Json) -> None:
    assert set(body) == {"error"}, body
    _validate("ErrorPayload", {"type": body["error"].get("type"), **body["error"]})
    assert isinstance(body["error"]["type"], str) and body["error"]["message"]


def expect_error(r: httpx.Response, status: int, param: str | None, code: str | None = None) -> Json:
    """``r`` is a valid error body with ``status``, ``param`` and, if given, ``code``; its
    ``error`` object."""
    assert r.status_code == status, r.text
    body = r.json()
    validate_error_body(body)
    assert body["error"]["param"] == param, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return dict(body["error"])


def _text_of(part: Json) -> str:
    return str(part.get("text", ""))


def check_stream(events: list[Json], sse_names: list[str] | None = None) -> Json:
    """Validate a whole stream; returns the terminal response object."""
    assert events, "empty stream"
    for event in events:
        validate_event(event)
    if sse_names is not None:
        assert sse_names == [e["type"] for e in events], "SSE event names differ from payload types"
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[0] in (0, 1), f"bad sequence {seqs}"
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types[:2]
    terminals = [i for i, t in enumerate(types) if t in TERMINAL]
    assert terminals == [len(events) - 1], f"need exactly one terminal event, last: {types[-3:]}"
    response_id = events[0]["response"]["id"]
    items: dict[int, Json] = {}  # output_index -> item as added
    done_items: dict[int, Json] = {}
    parts: dict[tuple[str, int], list[str]] = {}  # open content parts -> deltas
    part_done: dict[tuple[str, int], str] = {}
    args: dict[str, list[str]] = {}
    for e in events[2:-1]:
        t = e["type"]
        if t.startswith("response.") and "response" in e:
            assert e["response"]["id"] == response_id
        if t == "response.output_item.added":
            idx = e["output_index"]
            assert idx == len(items), f"output_index {idx} out of order"
            assert e["item"].get("status", "in_progress") == "in_progress"  # mcp_list_tools has none
            items[idx] = e["item"]
            continue
        if t == "error":
            continue
        idx = e["output_index"]
        assert idx in items and idx not in done_items, f"{t} for an item not open: {idx}"
        item_id = items[idx]["id"]
        if "item_id" in e:
            assert e["item_id"] == item_id, f"{t}: item id changed"
        if t == "response.content_part.added":
            key = (item_id, e["content_index"])
            assert key not in parts and key not in part_done
            parts[key] = []
        elif t in DELTA_DONE:
            key = (item_id, e["content_index"])
            assert key in parts and key not in part_done, f"{t} outside an open content part"
            parts[key].append(e["delta"])
        elif t in DELTA_DONE.values():
            key = (item_id, e["content_index"])
            assert "".join(parts[key]) == e["text"], f"{t}: text is not the sum of its deltas"
            part_done[key] = e["text"]
        elif t == "response.content_part.done":
            key = (item_id, e["content_index"])
            assert key in part_done and _text_of(e["part"]) == part_done[key], "content_part.done text"
            del parts[key]
        elif t in ("response.function_call_arguments.delta", "response.mcp_call_arguments.delta"):
            args.setdefault(item_id, []).append(e["delta"])
        elif t in ("response.function_call_arguments.done", "response.mcp_call_arguments.done"):
            assert "".join(args.get(item_id, [])) == e["arguments"], "arguments are not the sum of deltas"
        elif t == "response.output_item.done":
            assert not [k for k in parts if k[0] == item_id], "item done with an open content part"
            assert e["item"]["id"] == item_id and e["item"]["type"] == items[idx]["type"]
            assert e["item"].get("status", "completed") in ("completed", "incomplete", "failed"), e["item"]
            done_items[idx] = e["item"]
    assert set(done_items) == set(items), "every added item must be done"
    final: Json = events[-1]["response"]
    validate_response(final)
    assert final["output"] == [done_items[i] for i in sorted(done_items)], "output is not the fold"
    status = {"response.completed": "completed", "response.incomplete": "incomplete"}.get(types[-1])
    if status is not None:
        assert final["status"] == status
    else:
        assert final["status"] in ("failed", "cancelled")
    return final
