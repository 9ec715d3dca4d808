"""The pre-encoded Messages stream (``MessagesEncoder(wire=True)`` framed by
:func:`app.api.messages.wire.frame`) is byte for byte the generic one (the dicts framed by
:func:`app.http.sse.typed_event`), hostile text included, and its deltas really are pre-encoded."""

from __future__ import annotations

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

USAGE = Usage(prompt_tokens=20, completion_tokens=7, cached_tokens=5)
HOSTILE = ['"', "\\", '\\"', "\x00", "\x01\x1f", "\x7f", "\n\n", "\r\n", "data: x\n\nevent: error\n",
           "\u2028", "\u2029", "é", "日本語", "😀", "\ufeff", "\ufffd", "</script>", "{}", '"}}', "\t",
           "\U0010ffff", "a" * 300]


def _seal(text: str) -> str:
    return f"sealed[{text}]"


def _frames(events: list[ev.Event], *, pre: bool, show_thinking: bool = True,
            server: bool = False) -> tuple[list[bytes], dict[str, Any], list[Any]]:
    blocks = ServerBlocks({code.NAME: "code_execution"}, _seal) if server else None
    enc = MessagesEncoder("msg_w", "claude-x", _seal, show_thinking=show_thinking, server=blocks, wire=pre)
    payloads = enc.start()
    for e in events:
        payloads.extend(enc.encode(e))
    frame = wire.frame if pre else typed_event
    return [frame(p) for p in payloads], enc.result(), payloads


def _same(events: list[ev.Event], **kwargs: Any) -> list[Any]:
    generic, generic_result, _ = _frames(events, pre=False, **kwargs)
    pre, pre_result, payloads = _frames(events, pre=True, **kwargs)
    assert pre == generic
    assert pre_result == generic_result
    return payloads


def test_the_deltas_and_the_ping_leave_pre_encoded() -> None:
    events: list[ev.Event] = [
        ev.ReasoningDelta("th"), ev.ReasoningDelta("ink"), ev.PartDone("reasoning"),
        ev.TextDelta("a"), ev.TextDelta('"b"'), ev.ToolCallStarted(0, "toolu_1", "Write"),
        ev.ToolCallArgumentsDelta(0, '{"p": '), ev.ToolCallArgumentsDelta(0, '"x\\n"}'),
        ev.ToolCallDone(0, "toolu_1", "Write", '{"p": "x\\n"}'), ev.Finished("tool_calls", USAGE)]
    payloads = _same(events)
    pre = [p for p in payloads if type(p) is wire.Wire]
    deltas = [f for f in _frames(events, pre=False)[0] if f.startswith(b"event: content_block_delta")
              and b"signature_delta" not in f]
    assert [p.frame for p in pre] == [typed_event({"type": "ping"}), *deltas]
    assert len(deltas) == 6  # 2 thinking, 2 text, 2 input_json
    assert b'"partial_json":"\\"x\\\\n\\"}"' in deltas[-1]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_escaped_as_orjson_escapes_the_whole_event(text: str) -> None:
    events: list[ev.Event] = [ev.ReasoningDelta(text), ev.ReasoningDelta(text), ev.PreambleDelta(text),
                              ev.TextDelta(text), ev.TextDelta(text),
                              ev.ToolCallStarted(0, "toolu_h", "f"), ev.ToolCallArgumentsDelta(0, text),
                              ev.ToolCallArgumentsDelta(0, text), ev.Finished("tool_calls", USAGE)]
    _same(events)
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
    events: list[ev.Event] = [ev.TextDelta("a"), ev.TextDelta("\ud800")]
    with pytest.raises(TypeError):
        _frames(events, pre=False)
    with pytest.raises(TypeError):
        _frames(events, pre=True)


_TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12))
_EVENT = st.one_of(
    st.builds(ev.TextDelta, _TEXT), st.builds(ev.PreambleDelta, _TEXT), st.builds(ev.ReasoningDelta, _TEXT),
    st.sampled_from([ev.PartDone("text"), ev.PartDone("reasoning"), ev.PartDone("preamble")]),
    st.builds(lambda n: ev.ToolCallStarted(0, f"toolu_{n}", "tool"), st.integers(0, 3)),
    st.builds(lambda t: ev.ToolCallArgumentsDelta(0, t), _TEXT),
    st.builds(lambda n, t: ev.ToolCallDone(0, f"toolu_{n}", "tool", t), st.integers(0, 3), _TEXT))


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, max_size=25), st.booleans(),
       st.sampled_from([ev.Finished("stop", USAGE), ev.Finished("length", USAGE),
                        ev.Finished("stop", USAGE, stop_sequence='"\\\n'),
                        ev.Error("broke \u2028 off", code="model_output_error")]))
def test_any_event_sequence_frames_byte_for_byte(events: list[ev.Event], show_thinking: bool,
                                                 end: ev.Event) -> None:
    _same([*events, end], show_thinking=show_thinking)
