"""The pre-encoded Chat Completions stream (``ChatEncoder(wire=True)`` framed by
:func:`app.api.chat.wire.frame`) is byte for byte the generic one (the chunk dicts framed by
:func:`app.http.sse.data_event`), hostile text included, and its common deltas really are
pre-encoded."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.chat import wire
from app.api.chat.encode import ChatEncoder
from app.core import events as ev
from app.core.output import TokenLogprob, TopLogprob, Usage
from app.http.sse import data_event
from tests.support import wire_streams
from tests.support.wire_streams import Framed

USAGE = Usage(prompt_tokens=20, completion_tokens=7, reasoning_tokens=3, cached_tokens=5)
HOSTILE = [*wire_streams.HOSTILE, "data: x\n\ndata: [DONE]\n\n", '"}]}', ""]
MODELS = ["gpt-oss-20b", 'we"ird\\model\u2028😀', ""]


def _frames(events: list[ev.Event], *, pre: bool, model: str = "gpt-oss-20b", index: int = 0,
            logprobs: bool = False, usage: bool = True, join: bool = True,
            takes: Container[int] = wire_streams.EVERY) -> Framed:
    enc = ChatEncoder('chatcmpl-"w', model, 1_700_000_000, include_usage=usage, logprobs=logprobs,
                      top_logprobs=1 if logprobs else 0, index=index, wire=pre, join=join)
    return wire_streams.drive(enc, events, wire.frame if pre else data_event, takes)


def _kinds(payloads: list[Any]) -> list[str]:
    return [f"wire{len(p.pieces)}" if type(p) is wire.Deltas else "dict" for p in payloads]


def _same(events: list[ev.Event], **kwargs: Any) -> list[Any]:
    return wire_streams.same_bytes(_frames, events, **kwargs)[1]


def test_the_common_deltas_leave_pre_encoded() -> None:
    events: list[ev.Event] = [
        ev.ReasoningDelta("th"), ev.ReasoningDelta("ink"), ev.PartDone("reasoning"),
        ev.PreambleDelta("So "), ev.TextDelta("a"), ev.TextDelta('"b"'),
        ev.ToolCallStarted(0, "call_1", "Write"), ev.ToolCallArgumentsDelta(0, '{"p": '),
        ev.ToolCallArgumentsDelta(0, '"x\\n"}'), ev.ToolCallDone(0, "call_1", "Write", '{"p": "x\\n"}'),
        ev.ToolCallStarted(1, "call_2", "Read"), ev.ToolCallArgumentsDelta(1, "{}"),
        ev.Finished("tool_calls", USAGE)]
    payloads = _same(events)
    # role, 2 reasoning, preamble, 2 text, call start, 2 args, call start, 1 arg, finish, usage
    assert _kinds(payloads) == ["dict", "wire1", "wire1", "wire1", "wire1", "wire1", "dict", "wire1",
                                "wire1", "dict", "wire1", "dict", "dict"]
    generic = _frames(events, pre=False)[0]
    assert wire.frame(payloads[8]) == generic[8]
    assert b'"arguments":"\\"x\\\\n\\"}"' in wire.frame(payloads[8])
    assert orjson.loads(wire.frame(payloads[10])[6:])["choices"][0]["delta"] == {
        "tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}
    # a sender that lags: the deltas of one field (preamble and text are both content) that
    # wait together are one payload; n > 1 choices (join=False) keep one payload each
    assert _kinds(_same(events, takes=())) == ["dict", "wire2", "wire3", "dict", "wire2", "dict",
                                               "wire1", "dict", "dict"]
    assert _kinds(_same(events, takes=(), join=False)) == _kinds(payloads)
    # taken after the first text delta: the next one starts a payload of its own
    assert _kinds(_same(events, takes={4})) == ["dict", "wire2", "wire2", "wire1", "dict", "wire2",
                                                "dict", "wire1", "dict", "dict"]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("model", MODELS)
def test_hostile_text_is_escaped_as_orjson_escapes_the_whole_chunk(text: str, model: str) -> None:
    events: list[ev.Event] = [ev.ReasoningDelta(text), ev.ReasoningDelta(text), ev.PreambleDelta(text),
                              ev.TextDelta(text), ev.TextDelta(text),
                              ev.ToolCallStarted(0, "call_h", "f"), ev.ToolCallArgumentsDelta(0, text),
                              ev.ToolCallArgumentsDelta(0, text), ev.Finished("tool_calls", USAGE)]
    payloads = _same(events, model=model)
    assert sum(type(p) is wire.Deltas for p in payloads) == 7
    _same(events, model=model, takes=())
    for f in _frames(events, pre=True, model=model)[0]:  # one SSE event per frame: no raw line break
        assert f.startswith(b"data: ") and f.endswith(b"\n\n") and b"\n" not in f[:-2] and b"\r" not in f
        orjson.loads(f[6:])


def test_logprobs_and_other_choices_go_their_own_way() -> None:
    lp = (TokenLogprob("a", -0.5, top=(TopLogprob("a", -0.5),)),)
    events: list[ev.Event] = [ev.ReasoningDelta("r"), ev.TextDelta("a", lp), ev.TextDelta("\u2028", lp),
                              ev.Finished("stop", USAGE)]
    payloads = _same(events, logprobs=True, index=3, usage=False)
    assert _kinds(payloads) == ["dict", "wire1", "dict", "dict", "dict"]  # text with logprobs: a dict
    assert b'"index":3' in wire.frame(payloads[1])


def test_a_lone_surrogate_is_refused_by_both_encodings() -> None:
    wire_streams.lone_surrogate_refused(_frames)


def test_not_streamed_or_not_asked_nothing_is_pre_encoded() -> None:
    enc = ChatEncoder("chatcmpl-x", "m", 0, include_usage=False, logprobs=False, wire=False)
    assert all(type(p) is dict for e in (ev.TextDelta("a"), ev.ReasoningDelta("b")) for p in enc.encode(e))
    quiet = ChatEncoder("chatcmpl-x", "m", 0, include_usage=False, logprobs=False, stream=False, wire=True)
    assert quiet.encode(ev.TextDelta("a")) == [] and quiet.result()["choices"][0]["message"]["content"] == "a"


_TEXT = wire_streams.texts(HOSTILE)
_EVENT = wire_streams.events(
    _TEXT,
    st.builds(lambda i, n: ev.ToolCallStarted(i, f"call_{n}", "tool"), st.integers(0, 12), st.integers(0, 3)),
    st.builds(ev.ToolCallArgumentsDelta, st.integers(0, 12), _TEXT),
    st.builds(lambda i, t: ev.ToolCallDone(i, "call_x", "tool", t), st.integers(0, 3), _TEXT))


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, max_size=25), st.sampled_from(MODELS), st.integers(0, 11), st.booleans(),
       st.sampled_from([ev.Finished("stop", USAGE), ev.Finished("length", USAGE),
                        ev.Finished("tool_calls", USAGE),
                        ev.Error("broke \u2028 off", code="model_output_error")]),
       st.frozensets(st.integers(0, 25)), st.booleans())
def test_any_event_sequence_frames_byte_for_byte(events: list[ev.Event], model: str, index: int,
                                                 usage: bool, end: ev.Event, takes: frozenset[int],
                                                 join: bool) -> None:
    """Whenever the sender takes what is queued (``takes``), the same bytes."""
    started = [i for i, e in enumerate(events) if type(e) is ev.ToolCallStarted]
    # a call's arguments come after a call started (as every backend's events do)
    events = [e for i, e in enumerate(events) if type(e) not in (ev.ToolCallArgumentsDelta, ev.ToolCallDone)
              or (started and i > started[0])]
    _same([*events, end], model=model, index=index, usage=usage, takes=takes, join=join)
