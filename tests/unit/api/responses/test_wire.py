"""The pre-encoded Responses stream (``ResponsesEncoder(wire=True)`` framed by
:func:`app.api.responses.wire.frame`) is byte for byte the generic one (the event dicts framed
by :func:`app.http.sse.named_event`), hostile text and both event dialects included, and its
plain deltas really are pre-encoded with their own sequence numbers."""

from __future__ import annotations

import itertools
from collections.abc import Container
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.responses import wire
from app.api.responses.dialect import OPEN_RESPONSES, OPENAI, EventDialect
from app.api.responses.encode import ResponsesEncoder
from app.api.responses.tools import WireTool
from app.core import events as ev
from app.core.output import TokenLogprob, TopLogprob, Usage
from app.http.sse import named_event
from tests.support import wire_streams
from tests.support.wire_streams import Framed

USAGE = Usage(prompt_tokens=20, completion_tokens=7, reasoning_tokens=3, cached_tokens=5)
HOSTILE = [*wire_streams.HOSTILE, "event: error\ndata: {}\n\n", '","logprobs":[1]}', ""]
TOOLS = {"custom_t": WireTool("custom", "custom_t"), "ns__f": WireTool("function", "f", 'n"s'),
         "srv__look": WireTool("mcp", "look", "srv")}
LP = (TokenLogprob("a", -0.5, top=(TopLogprob("a", -0.5),)),)


def _frames(events: list[ev.Event], *, pre: bool, dialect: EventDialect = OPEN_RESPONSES,
            summary: str | None = None, top: int = 0, takes: Container[int] = wire_streams.EVERY) -> Framed:
    ids = itertools.count()
    with mock.patch("app.api.responses.encode.random_id", lambda prefix: f'{prefix}"{next(ids)}'):
        resource = {"id": "resp_w", "object": "response", "status": "in_progress", "output": [],
                    "top_logprobs": top}
        enc = ResponsesEncoder(resource, dialect, tools=TOOLS, summary=summary, wire=pre)
        return wire_streams.drive(enc, events, wire.frame if pre else (lambda p: named_event(p["type"], p)),
                                  takes)


def _same(events: list[ev.Event], **kwargs: Any) -> list[Any]:
    pre, payloads = wire_streams.same_bytes(_frames, events, **kwargs)
    events = wire_streams.sse_events(b"".join(pre))
    numbers = [orjson.loads(f.split(b"\ndata: ", 1)[1])["sequence_number"] for f in events]
    assert numbers == list(range(len(events)))  # from 0 without gaps, the pre-encoded ones included
    return payloads


def _kinds(payloads: list[Any]) -> list[str]:
    return [f"wire{len(p.pieces)}" if type(p) is wire.Deltas else p["type"].removeprefix("response.")
            for p in payloads]


def test_the_plain_deltas_leave_pre_encoded() -> None:
    events = wire_streams.two_of_each("call_1", "ns__f", USAGE)
    payloads = _same(events, dialect=OPENAI)
    kinds = _kinds(payloads)
    assert kinds.count("wire1") == 6 and not any(k.endswith(".delta") for k in kinds)
    frames = [wire.frame(p) for p in payloads if type(p) is wire.Deltas]
    assert frames[0].startswith(b"event: response.reasoning_text.delta\n")
    assert frames[2].startswith(b"event: response.output_text.delta\n") and b'"logprobs":[]}' in frames[2]
    assert b'"delta":"\\"x\\\\n\\"}"' in frames[5]


def test_logprobs_live_summaries_custom_and_mcp_calls_stay_dicts() -> None:
    events: list[ev.Event] = [
        ev.ReasoningDelta("r"), ev.ReasoningDelta("s"), ev.PartDone("reasoning"),
        ev.TextDelta("a", LP), ev.TextDelta("b"), ev.PartDone("text"),
        ev.ToolCallStarted(0, "call_c", "custom_t"), ev.ToolCallArgumentsDelta(0, '{"input": "x"}'),
        ev.ToolCallDone(0, "call_c", "custom_t", '{"input": "x"}'),
        ev.ToolCallStarted(1, "call_m", "srv__look"), ev.ToolCallArgumentsDelta(1, "{}"),
        ev.ToolCallDone(1, "call_m", "srv__look", "{}"), ev.Finished("tool_calls", USAGE)]
    payloads = _same(events, summary="auto", top=1)
    kinds = _kinds(payloads)
    assert kinds.count("wire1") == 1  # the text delta without logprobs only
    for name in ("reasoning.delta", "reasoning_summary_text.delta", "output_text.delta",
                 "custom_tool_call_input.delta", "mcp_call_arguments.delta"):
        assert name in kinds


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_escaped_as_orjson_escapes_the_whole_event(text: str) -> None:
    events: list[ev.Event] = [ev.ReasoningDelta(text), ev.ReasoningDelta(text), ev.PreambleDelta(text),
                              ev.PreambleDelta(text), ev.TextDelta(text), ev.TextDelta(text),
                              ev.ToolCallStarted(0, "call_h", "f"), ev.ToolCallArgumentsDelta(0, text),
                              ev.ToolCallArgumentsDelta(0, text), ev.Finished("tool_calls", USAGE)]
    payloads = _same(events)
    assert _kinds(payloads).count("wire1") == 8
    _same(events, takes=())
    for f in _frames(events, pre=True)[0]:  # one SSE event per frame: no raw line break inside
        assert f.endswith(b"\n\n") and f[:-2].count(b"\n") == 1 and b"\r" not in f


def test_an_open_items_next_deltas_take_its_frame_only_when_plain() -> None:
    """Once an item's deltas have their frame, the next ones of that item take it at once
    (the encoder's fast path); a delta with logprobs in between goes its own way, and a new
    item's first delta cuts that item's frame, with the numbering unbroken.  A sender that
    lags: the fast path's deltas join one payload while they wait."""
    events: list[ev.Event] = [
        ev.TextDelta("a"), ev.TextDelta("b", LP), ev.TextDelta("c"), ev.TextDelta(""),
        ev.ReasoningDelta("r"), ev.ReasoningDelta("s"), ev.TextDelta("d"),
        ev.ToolCallStarted(0, "call_1", "f"), ev.ToolCallArgumentsDelta(0, "{"),
        ev.ToolCallArgumentsDelta(0, "}"), ev.ToolCallDone(0, "call_1", "f", "{}"),
        ev.TextDelta("e", LP), ev.TextDelta("f"), ev.Finished("stop", USAGE)]
    kinds = _kinds(_same(events, top=1))
    deltas = [k for k in kinds if k.startswith("wire") or k.endswith(".delta")]
    assert deltas == ["wire1", "output_text.delta", "wire1", "wire1", "wire1", "wire1", "wire1", "wire1",
                      "wire1", "output_text.delta", "wire1"]
    kinds = _kinds(_same(events, top=1, takes=()))
    deltas = [k for k in kinds if k.startswith("wire") or k.endswith(".delta")]
    assert deltas == ["wire1", "output_text.delta", "wire2", "wire1", "wire1", "wire1", "wire1", "wire1",
                      "output_text.delta", "wire1"]


def test_a_lone_surrogate_is_refused_by_both_encodings() -> None:
    wire_streams.lone_surrogate_refused(_frames)


_TEXT = wire_streams.texts(HOSTILE)
_EVENT = wire_streams.events(
    _TEXT, st.builds(ev.TextDelta, _TEXT, st.just(LP)),
    st.builds(lambda n, name: ev.ToolCallStarted(n, f"call_{n}", name), st.integers(0, 3),
              st.sampled_from(["f", "ns__f", "custom_t"])),
    st.builds(lambda t: ev.ToolCallArgumentsDelta(0, t), _TEXT),
    st.builds(lambda t: ev.ToolCallDone(0, "call_x", "f", t), _TEXT))


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, max_size=25), st.sampled_from([OPEN_RESPONSES, OPENAI]),
       st.sampled_from([None, "auto", "concise", "detailed"]), st.integers(0, 2),
       st.sampled_from([ev.Finished("stop", USAGE), ev.Finished("length", USAGE),
                        ev.Error("broke \u2028 off", code="model_output_error")]),
       st.frozensets(st.integers(0, 25)))
def test_any_event_sequence_frames_byte_for_byte(events: list[ev.Event], dialect: EventDialect,
                                                 summary: str | None, top: int, end: ev.Event,
                                                 takes: frozenset[int]) -> None:
    """Whenever the sender takes what is queued (``takes``), the same bytes."""
    opened = False  # a call's arguments come while a call is open (as every backend's events do)
    kept: list[ev.Event] = []
    for e in events:
        if type(e) in (ev.ToolCallArgumentsDelta, ev.ToolCallDone) and not opened:
            continue
        opened = type(e) is ev.ToolCallStarted or (opened and type(e) is ev.ToolCallArgumentsDelta)
        kept.append(e)
    _same([*kept, end], dialect=dialect, summary=summary, top=top, takes=takes)
