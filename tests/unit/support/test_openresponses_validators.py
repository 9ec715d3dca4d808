"""The Open Responses validators catch what they claim to (each corruption must fail)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from app.api.responses.encode import ResponsesEncoder
from app.core import events as ev
from app.core.output import Usage
from tests.support.openresponses import check_stream, validate_error_body, validate_response

Json = dict[str, Any]


def _resource() -> Json:
    return {"id": "resp_1", "object": "response", "created_at": 1, "completed_at": None,
            "status": "in_progress",
            "incomplete_details": None, "model": "m", "previous_response_id": None, "instructions": None,
            "output": [], "error": None, "tools": [], "tool_choice": "auto", "truncation": "disabled",
            "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0, "temperature": 1.0,
            "reasoning": {"effort": "low", "summary": None}, "usage": None, "max_output_tokens": None,
            "max_tool_calls": None, "store": True, "background": False, "service_tier": "auto",
            "metadata": {}, "safety_identifier": None, "prompt_cache_key": None}


def _stream() -> list[Json]:
    enc = ResponsesEncoder(_resource())
    out = enc.start()
    for event in [ev.ReasoningDelta("Think"), ev.ReasoningDelta("ing."), ev.PartDone("reasoning"),
                  ev.TextDelta("Hel"), ev.TextDelta("lo"), ev.PartDone("text"),
                  ev.ToolCallStarted(0, "call_1", "f"), ev.ToolCallArgumentsDelta(0, '{"a"'),
                  ev.ToolCallArgumentsDelta(0, ":1}"), ev.ToolCallDone(0, "call_1", "f", '{"a":1}'),
                  ev.Finished("tool_calls", Usage(3, 9, 2))]:
        out += enc.encode(event)
    return out


def test_valid_stream_passes() -> None:
    final = check_stream(_stream())
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]


def _index(events: list[Json], type_: str) -> int:
    return next(i for i, e in enumerate(events) if e["type"] == type_)


def _repeat_seq(s: list[Json]) -> None:
    s[3]["sequence_number"] = s[2]["sequence_number"]


def _delta_after_done(s: list[Json]) -> None:
    i = _index(s, "response.output_text.done")
    s.insert(i + 1, {**s[i - 1]})
    for n, e in enumerate(s):
        e["sequence_number"] = n


def _drop_item_done(s: list[Json]) -> None:
    del s[_index(s, "response.output_item.done")]
    for n, e in enumerate(s):
        e["sequence_number"] = n


def _wrong_done_text(s: list[Json]) -> None:
    s[_index(s, "response.output_text.done")]["text"] = "Help"


def _wrong_arguments(s: list[Json]) -> None:
    s[_index(s, "response.function_call_arguments.done")]["arguments"] = "{}"


def _output_not_fold(s: list[Json]) -> None:
    s[-1]["response"]["output"] = s[-1]["response"]["output"][:1]


def _unknown_type(s: list[Json]) -> None:
    s[4]["type"] = "response.made_up"


def _missing_field(s: list[Json]) -> None:
    del s[_index(s, "response.output_text.delta")]["item_id"]


def _two_terminals(s: list[Json]) -> None:
    s.append({**copy.deepcopy(s[-1]), "sequence_number": len(s)})


def _in_progress_item_at_end(s: list[Json]) -> None:
    s[-1]["response"]["output"][0]["status"] = "in_progress"
    s[_index(s, "response.output_item.done")]["item"]["status"] = "in_progress"


@pytest.mark.parametrize("corrupt", [_repeat_seq, _delta_after_done, _drop_item_done, _wrong_done_text,
                                     _wrong_arguments, _output_not_fold, _unknown_type, _missing_field,
                                     _two_terminals, _in_progress_item_at_end])
def test_corruptions_fail(corrupt: Callable[[list[Json]], None]) -> None:
    events = copy.deepcopy(_stream())
    corrupt(events)
    with pytest.raises((AssertionError, KeyError)):
        check_stream(events)


def test_wrong_sse_name_fails() -> None:
    events = _stream()
    names = [e["type"] for e in events]
    names[5] = "message"
    with pytest.raises(AssertionError):
        check_stream(events, names)


def test_schema_checks() -> None:
    resource = _resource()
    validate_response(resource)
    del resource["usage"]
    with pytest.raises(AssertionError):
        validate_response(resource)
    validate_error_body({"error": {"message": "m", "type": "invalid_request_error", "param": None,
                                   "code": None}})
    with pytest.raises(AssertionError):
        validate_error_body({"error": {"message": "m"}})
