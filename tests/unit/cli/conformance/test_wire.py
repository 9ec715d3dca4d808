"""The wire-order checker: a good stream passes, each rule fails on a stream that breaks it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli.conformance import spec
from app.cli.conformance.wire import check_stream

Json = dict[str, Any]


def _response(status: str, output: list[Json]) -> Json:
    return {"id": "resp_1", "object": "response", "status": status, "output": output}


def build(items: list[tuple[str, list[str]]], start: int = 0) -> list[Json]:
    """A well-formed stream: ("message" | "function_call", deltas) per output item."""
    events: list[Json] = [{"type": "response.created", "response": _response("in_progress", [])},
                          {"type": "response.in_progress", "response": _response("in_progress", [])}]
    done: list[Json] = []
    for idx, (kind, deltas) in enumerate(items):
        iid = f"item_{idx}"
        text = "".join(deltas)
        if kind == "message":
            added = {"id": iid, "type": "message", "role": "assistant", "status": "in_progress",
                     "content": []}
            part = {"type": "output_text", "text": text, "annotations": []}
            final = {**added, "status": "completed", "content": [part]}
            common = {"item_id": iid, "output_index": idx, "content_index": 0}
            events += [{"type": "response.output_item.added", "output_index": idx, "item": added},
                       {"type": "response.content_part.added", **common,
                        "part": {"type": "output_text", "text": "", "annotations": []}},
                       *({"type": "response.output_text.delta", **common, "delta": d} for d in deltas),
                       {"type": "response.output_text.done", **common, "text": text},
                       {"type": "response.content_part.done", **common, "part": part}]
        else:
            added = {"id": iid, "type": "function_call", "call_id": f"call_{idx}", "name": "f",
                     "arguments": "", "status": "in_progress"}
            final = {**added, "arguments": text, "status": "completed"}
            common = {"item_id": iid, "output_index": idx}
            events += [{"type": "response.output_item.added", "output_index": idx, "item": added},
                       *({"type": "response.function_call_arguments.delta", **common, "delta": d}
                         for d in deltas),
                       {"type": "response.function_call_arguments.done", **common, "arguments": text}]
        events.append({"type": "response.output_item.done", "output_index": idx, "item": final})
        done.append(final)
    events.append({"type": "response.completed", "response": _response("completed", done)})
    for n, e in enumerate(events):
        e["sequence_number"] = start + n
    return events


GOOD = build([("message", ["Hel", "lo", "!"]), ("function_call", ['{"a"', ":1}"])])


def rules(events: list[Json], **kw: Any) -> set[str]:
    return {p.split(":", 1)[0] for p in check_stream(events, **kw)}


def test_good_stream_passes() -> None:
    assert check_stream(GOOD) == []
    assert check_stream(build([("message", ["x"])], start=1)) == []
    assert check_stream(build([]), [e["type"] for e in build([])]) == []


def _mutate(fn: Any) -> list[Json]:
    events = copy.deepcopy(GOOD)
    fn(events)
    return events


def _renumber(events: list[Json]) -> None:
    for n, e in enumerate(events):
        e["sequence_number"] = n


def _pop(events: list[Json], type_: str) -> None:
    events.remove(next(e for e in events if e["type"] == type_))
    _renumber(events)


BAD: list[tuple[str, Any]] = [
    ("seq", lambda es: es[3].update(sequence_number=7)),
    ("seq", lambda es: [e.update(sequence_number=e["sequence_number"] + 5) for e in es]),
    ("first", lambda es: (es.pop(0), _renumber(es))),
    ("terminal", lambda es: (es.pop(), _renumber(es))),
    ("terminal", lambda es: (es.insert(3, copy.deepcopy(es[-1])), _renumber(es))),
    ("response-id", lambda es: es[1]["response"].update(id="resp_other")),
    ("item", lambda es: es[2].update(output_index=1)),
    ("item", lambda es: es[2]["item"].update(status="completed")),
    ("item", lambda es: next(e for e in es if e["type"] == "response.output_text.delta").update(item_id="x")),
    ("item", lambda es: next(e for e in es if e["type"] == "response.output_item.done")["item"].update(
        status="in_progress")),
    ("part", lambda es: _pop(es, "response.content_part.added")),
    ("part", lambda es: _pop(es, "response.content_part.done")),
    ("part", lambda es: next(e for e in es if e["type"] == "response.content_part.added").update(
        content_index=1)),
    ("text", lambda es: next(e for e in es if e["type"] == "response.output_text.done").update(text="Hi")),
    ("text", lambda es: next(e for e in es if e["type"] == "response.function_call_arguments.done").update(
        arguments="{}")),
    ("text", lambda es: next(e for e in es if e["type"] == "response.content_part.done")["part"].update(
        text="other")),
    ("fold", lambda es: es[-1]["response"].update(output=[])),
    ("fold", lambda es: es[-1]["response"].update(status="incomplete")),
]


@pytest.mark.parametrize(("rule", "mutation"), BAD, ids=[f"{r}-{n}" for n, (r, _) in enumerate(BAD)])
def test_each_rule_fails_on_a_bad_stream(rule: str, mutation: Any) -> None:
    assert rule in rules(_mutate(mutation))


def test_sse_names_and_empty() -> None:
    names: list[str | None] = [e["type"] for e in GOOD]
    names[4] = "response.output_text.delta.wrong"
    assert "sse-name" in rules(GOOD, sse_names=names)
    assert check_stream([]) == ["terminal: empty stream"]


def test_error_endings() -> None:
    base = build([])[:-1]
    err = {"type": "error", "error": {"type": "server_error", "code": None, "message": "x", "param": None}}
    failed = {"type": "response.failed", "response": _response("failed", [])}
    ok = [*copy.deepcopy(base), dict(err), failed]
    _renumber(ok)
    assert check_stream(ok) == []
    bad = [*copy.deepcopy(base), dict(failed), dict(err)]
    _renumber(bad)
    assert "terminal" in rules(bad)


def test_the_built_stream_is_schema_valid_where_it_claims_to_be() -> None:
    """The hand-made events are shaped like the spec's (so the wire tests test real shapes)."""
    assert spec.validate_event(GOOD[4]) == []  # an output_text.delta
    assert spec.validate_event({"type": "response.output_text.delta"})  # missing fields


streams = st.lists(st.tuples(st.sampled_from(["message", "function_call"]),
                             st.lists(st.text(max_size=4), max_size=4)), max_size=4)


@settings(max_examples=150, deadline=None)
@given(streams, st.sampled_from([0, 1]))
def test_any_well_formed_stream_passes(items: list[tuple[str, list[str]]], start: int) -> None:
    assert check_stream(build(items, start)) == []


def _unnumbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events without their numbers and without empty deltas (which carry nothing)."""
    return [{k: v for k, v in e.items() if k != "sequence_number"} for e in events
            if e.get("delta", "x") != ""]


@settings(max_examples=150, deadline=None)
@given(streams.filter(lambda items: len(items) > 0), st.data())
def test_moving_or_dropping_an_event_is_caught(items: list[tuple[str, list[str]]],
                                               data: st.DataObject) -> None:
    events = build(items)
    original = copy.deepcopy(events)
    # response.in_progress is optional and an empty delta carries nothing: moving or dropping
    # them leaves a valid stream
    movable = [n for n, e in enumerate(events)
               if e["type"] != "response.in_progress" and e.get("delta", "x") != ""]
    i = data.draw(st.sampled_from(movable))
    if data.draw(st.booleans()):
        del events[i]
    else:
        j = data.draw(st.integers(0, len(events) - 1).filter(lambda j: j != i))
        moved = events.pop(i)
        if moved.get("delta") is not None and any(
                e.get("delta") == moved["delta"] for e in events[min(i, j) - 1:max(i, j) + 1]):
            return  # a delta moved past an equal delta
        events.insert(j, moved)
        if _unnumbered(events) == _unnumbered(original):
            return  # past its twin or an empty delta: the same stream
    _renumber(events)
    assert check_stream(events) != []
