"""The shared parts builder: whatever a parser does, the events are well formed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.formats.parsing.parts import Parts

ops = st.lists(st.one_of(
    st.tuples(st.just("delta"), st.sampled_from(["reasoning", "preamble", "text"]), st.text(max_size=3)),
    st.tuples(st.just("close")),
    st.tuples(st.just("start_call"), st.sampled_from(["f", "g"]), st.sampled_from([None, "id_x"])),
    st.tuples(st.just("arguments"), st.text(max_size=3)),
    st.tuples(st.just("end_call")),
    st.tuples(st.just("whole_call"), st.sampled_from(["f", "g"]), st.text(max_size=4)),
), max_size=30)


KINDS = {ev.ReasoningDelta: "reasoning", ev.PreambleDelta: "preamble", ev.TextDelta: "text"}


def run(script: list[tuple[object, ...]]) -> list[ev.Event]:
    parts, out = Parts(), list[ev.Event]()
    for op, *args in script:
        if op == "delta":
            parts.delta(args[0], str(args[1]), out)  # type: ignore[arg-type]
        elif op == "start_call":
            parts.start_call(str(args[0]), out, args[1])  # type: ignore[arg-type]
        elif op == "arguments":
            parts.arguments(str(args[0]), out)
        elif op == "whole_call":
            parts.whole_call(str(args[0]), str(args[1]), out)
        elif op == "close":
            parts.close(out)
        else:
            parts.end_call(out)
    parts.end(out)
    return out


@settings(max_examples=400, deadline=None)
@given(ops)
def test_events_are_well_formed_for_any_sequence_of_calls(script: list[tuple[object, ...]]) -> None:
    events = run(script)
    open_part: str | None = None
    open_call: ev.ToolCallStarted | None = None
    args: list[str] = []
    next_index = 0
    for e in events:
        if isinstance(e, ev.ReasoningDelta | ev.PreambleDelta | ev.TextDelta):
            kind = KINDS[type(e)]
            assert e.text and open_call is None and open_part in (None, kind)
            open_part = kind
        elif isinstance(e, ev.PartDone):
            assert open_part == e.kind  # only a part that had text is closed, once
            open_part = None
        elif isinstance(e, ev.ToolCallStarted):
            assert open_part is None and open_call is None and e.index == next_index and e.call_id
            open_call, args, next_index = e, [], next_index + 1
        elif isinstance(e, ev.ToolCallArgumentsDelta):
            assert open_call is not None and e.index == open_call.index and e.delta
            args.append(e.delta)
        elif isinstance(e, ev.ToolCallDone):
            assert open_call is not None and (e.index, e.call_id, e.name) == (
                open_call.index, open_call.call_id, open_call.name)
            assert e.arguments == "".join(args)
            open_call = None
    assert open_part is None and open_call is None  # end() closed everything


def test_a_models_own_call_id_is_kept_and_fresh_ones_are_unique() -> None:
    parts, out = Parts(), list[ev.Event]()
    parts.whole_call("f", "{}", out, call_id="call_model_1")
    parts.whole_call("f", "{}", out)
    parts.whole_call("f", "{}", out)
    ids = [e.call_id for e in out if isinstance(e, ev.ToolCallStarted)]
    assert ids[0] == "call_model_1" and len(set(ids)) == 3 and parts.calls == 3


def test_a_part_after_a_call_closes_the_call_first() -> None:
    parts, out = Parts(), list[ev.Event]()
    parts.delta("text", "a", out)
    parts.start_call("f", out)
    parts.arguments('{"x":', out)
    parts.delta("text", "b", out)
    assert [type(e).__name__ for e in out] == [
        "TextDelta", "PartDone", "ToolCallStarted", "ToolCallArgumentsDelta", "ToolCallDone", "TextDelta"]
