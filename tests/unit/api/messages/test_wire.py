"""The pre-encoded Messages stream (``MessagesEncoder(wire=True)`` framed by
:func:`app.api.messages.wire.frame`) is byte for byte the generic one (the dicts framed by
:func:`app.http.sse.typed_event`), hostile text included, and its deltas really are pre-encoded."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.messages import wire
from app.api.messages.encode import MessagesEncoder
from app.api.messages.server_blocks import ServerBlocks
from app.core import events as ev
from app.core.output import Usage
from app.http.sse import typed_event
from app.tools import code
from tests.support import wire_streams
from tests.support.wire_streams import Framed

USAGE = Usage(prompt_tokens=20, completion_tokens=7, cached_tokens=5)
HOSTILE = [*wire_streams.HOSTILE, "data: x\n\nevent: error\n", '"}}']


def _seal(text: str) -> str:
    return f"sealed[{text}]"


def _frames(events: list[ev.Event], *, pre: bool, show_thinking: bool = True,
            server: bool = False, takes: Container[int] = wire_streams.EVERY) -> Framed:
    blocks = ServerBlocks({code.NAME: "code_execution"}, _seal) if server else None
    enc = MessagesEncoder("msg_w", "claude-x", _seal, show_thinking=show_thinking, server=blocks, wire=pre)
    return wire_streams.drive(enc, events, wire.frame if pre else typed_event, takes)


def _kinds(payloads: list[Any]) -> list[str]:
    return [f"deltas{len(p.pieces)}" if type(p) is wire.Deltas else "wire" if type(p) is wire.Wire
            else p["type"] for p in payloads]


def _same(events: list[ev.Event], **kwargs: Any) -> list[Any]:
    return wire_streams.same_bytes(_frames, events, **kwargs)[1]


def test_the_deltas_and_the_ping_leave_pre_encoded() -> None:
    events = wire_streams.two_of_each("toolu_1", "Write", USAGE)
    payloads = _same(events)
    pre = [p for p in payloads if type(p) in (wire.Wire, wire.Deltas)]
    deltas = [f for f in _frames(events, pre=False)[0] if f.startswith(b"event: content_block_delta")
              and b"signature_delta" not in f]
    assert [wire.frame(p) for p in pre] == [typed_event({"type": "ping"}), *deltas]
    assert len(deltas) == 6  # 2 thinking, 2 text, 2 input_json
    assert b'"partial_json":"\\"x\\\\n\\"}"' in deltas[-1]
    # a sender that lags: a block's deltas after its first join one payload while they wait
    lagging = [k for k in _kinds(_same(events, takes=())) if k.startswith(("wire", "deltas"))]
    assert lagging == ["wire", "wire", "deltas1", "wire", "deltas1", "deltas2"]
    text = [ev.TextDelta("a"), ev.TextDelta("b"), ev.TextDelta("c"), ev.Finished("stop", USAGE)]
    assert _kinds(_same(text, takes=())) == ["message_start", "wire", "content_block_start", "wire",
                                             "deltas2", "content_block_stop", "message_delta", "message_stop"]
    assert _kinds(_same(text, takes={1})) == ["message_start", "wire", "content_block_start", "wire",
                                              "deltas1", "deltas1", "content_block_stop", "message_delta",
                                              "message_stop"]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_escaped_as_orjson_escapes_the_whole_event(text: str) -> None:
    events: list[ev.Event] = [ev.ReasoningDelta(text), ev.ReasoningDelta(text), ev.PreambleDelta(text),
                              ev.TextDelta(text), ev.TextDelta(text),
                              ev.ToolCallStarted(0, "toolu_h", "f"), ev.ToolCallArgumentsDelta(0, text),
                              ev.ToolCallArgumentsDelta(0, text), ev.Finished("tool_calls", USAGE)]
    _same(events)
    _same(events, takes=())
    frames = _frames(events, pre=True)[0]
    for f in frames:  # one SSE event per frame, whatever the text: no raw line break inside
        assert f.endswith(b"\n\n") and f[:-2].count(b"\n") == 1
        orjson.loads(f.split(b"\ndata: ", 1)[1])


def test_thinking_not_shown_and_repaired_arguments() -> None:
    events: list[ev.Event] = [ev.ReasoningDelta("secret"), ev.ReasoningDelta(" more"), ev.TextDelta("x"),
                              ev.ToolCallStarted(0, "toolu_r", "f"), ev.ToolCallArgumentsDelta(0, '{"a": 1'),
                              ev.ToolCallDone(0, "toolu_r", "f", '{"a": 1}'),
                              ev.Finished("tool_calls", USAGE)]
    _same(events, show_thinking=False)
    frames = b"".join(_frames(events, pre=True, show_thinking=False)[0])
    assert b"thinking_delta" not in frames and b'"partial_json":"}"' in frames


def test_a_server_tool_input_and_its_result() -> None:
    events: list[ev.Event] = [
        ev.TextDelta("Running."), ev.ToolCallStarted(0, "call_c", code.NAME),
        ev.ToolCallArgumentsDelta(0, "print(1)"), ev.ToolCallDone(0, "call_c", code.NAME, "print(1)"),
        ev.HostedCallDone("call_c", "1\n"), ev.TextDelta("Done: \u2028"),
        ev.Finished("stop", USAGE)]
    _same(events, server=True)


def test_a_lone_surrogate_is_refused_by_both_encodings() -> None:
    """Unreachable from a backend (orjson refuses one in the upstream JSON, the token decoder
    makes U+FFFD), and if one came both encodings refuse it alike."""
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(b'{"content": "\\ud800"}')
    wire_streams.lone_surrogate_refused(_frames)


_TEXT = wire_streams.texts(HOSTILE)
_EVENT = wire_streams.events(
    _TEXT, st.builds(lambda n: ev.ToolCallStarted(0, f"toolu_{n}", "tool"), st.integers(0, 3)),
    st.builds(lambda t: ev.ToolCallArgumentsDelta(0, t), _TEXT),
    st.builds(lambda n, t: ev.ToolCallDone(0, f"toolu_{n}", "tool", t), st.integers(0, 3), _TEXT))


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, max_size=25), st.booleans(),
       st.sampled_from([ev.Finished("stop", USAGE), ev.Finished("length", USAGE),
                        ev.Finished("stop", USAGE, stop_sequence='"\\\n'),
                        ev.Error("broke \u2028 off", code="model_output_error")]),
       st.frozensets(st.integers(0, 25)))
def test_any_event_sequence_frames_byte_for_byte(events: list[ev.Event], show_thinking: bool,
                                                 end: ev.Event, takes: frozenset[int]) -> None:
    """Whenever the sender takes what is queued (``takes``), the same bytes."""
    _same([*events, end], show_thinking=show_thinking, takes=takes)
