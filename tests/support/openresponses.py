"""Validators for what ``/v1/responses`` emits, against the Open Responses OpenAPI document.

* :func:`validate_response`, :func:`validate_event`, :func:`validate_error_body` — JSON Schema
  (2020-12) validation against ``tests/fixtures/openresponses/openapi.json`` (2026-04-24).
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

from jsonschema import Draft202012Validator
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


def validate_response(body: Json) -> None:
    _validate("ResponseResource", body)


def validate_event(event: Json) -> None:
    name = _event_schemas().get(event.get("type", ""))
    if name is None:
        raise AssertionError(f"unknown streaming event type {event.get('type')!r}")
    _validate(name, event)


def validate_error_body(body: Json) -> None:
    assert set(body) == {"error"}, body
    _validate("ErrorPayload", {"type": body["error"].get("type"), **body["error"]})
    assert isinstance(body["error"]["type"], str) and body["error"]["message"]


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
            assert e["item"]["status"] == "in_progress"
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
        elif t == "response.function_call_arguments.delta":
            args.setdefault(item_id, []).append(e["delta"])
        elif t == "response.function_call_arguments.done":
            assert "".join(args.get(item_id, [])) == e["arguments"], "arguments are not the sum of deltas"
        elif t == "response.output_item.done":
            assert not [k for k in parts if k[0] == item_id], "item done with an open content part"
            assert e["item"]["id"] == item_id and e["item"]["type"] == items[idx]["type"]
            assert e["item"]["status"] in ("completed", "incomplete"), e["item"]["status"]
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
