"""Spec §16 worked examples and §17 conformance fixtures, through the stream decoder.

Each transcript's last assistant turn (everything after the last non-assistant message)
is fed to the decoder as model output, once whole and once character by character.
Fixtures 4 and 8 are about tool replies, which are input, not output: the decoder's part
is to end the turn when the model starts one; the transcript checks are in
``tests/unit/test_transcript.py``.
"""

from __future__ import annotations

import re

import pytest

from app.api.chat.fold import Folded
from app.core import events as ev
from app.core.output import Chunk, Finish
from app.formats.openchatml.parse import OpenChatMLDecoder
from app.formats.parsing.text import TextEventParser
from tests.support.paths import FIXTURES
from tests.unit.formats.openchatml.test_hip1 import normalize

OPENCHATML = FIXTURES / "openchatml"


def last_turn(name: str) -> str:
    text = OPENCHATML.joinpath(name).read_text(encoding="utf-8")
    starts = [m.start() for m in re.finditer(r"^<\|start\|>", text, re.M)]
    i = len(starts)
    while i > 0 and text.startswith("<|start|>assistant", starts[i - 1]):
        i -= 1
    turn = text[starts[i]:] if i < len(starts) else ""
    assert turn.startswith("<|start|>assistant"), name
    return turn.removeprefix("<|start|>assistant").rstrip("\n")


def decode(text: str, by_char: bool, **options: object) -> list[ev.Event]:
    parser = TextEventParser(OpenChatMLDecoder(**options), prompt_tokens=1)  # type: ignore[arg-type]
    events: list[ev.Event] = []
    for piece in (list(text) if by_char else [text]):
        events += parser.feed(Chunk(text=piece))
    return events + parser.feed(Chunk(finish=Finish("eos"))) + parser.close()


def fold(events: list[ev.Event]) -> Folded:
    f = Folded()
    for e in events:
        f.add(e)
    return f


def both(name: str, **options: object) -> Folded:
    turn = last_turn(name)
    whole, chars = decode(turn, False, **options), decode(turn, True, **options)
    assert normalize(whole) == normalize(chars)
    return fold(whole)


def test_16_1_minimal_chat() -> None:
    f = both("spec_16_1_minimal_chat.ocml")
    assert (f.reasoning, f.text, f.finish_reason) == ("Simple arithmetic; answer directly.", "4.",
                                                      "stop")


def test_16_2_canonical_function_call() -> None:
    f = both("spec_16_2_function_call.ocml")
    assert (f.text, f.finish_reason) == ("It’s 20 °C and sunny in Tokyo right now.", "stop")
    text = OPENCHATML.joinpath("spec_16_2_function_call.ocml").read_text(encoding="utf-8")
    call_turn = text[text.index("<|start|>assistant<|channel|>analysis"):text.index("<|start|>tool")]
    events = decode(call_turn.removeprefix("<|start|>assistant"), True, require_channels=True)
    f = fold(events)
    assert f.reasoning == "Call functions.get_current_weather with location Tokyo."
    assert [(c.call_id, c.name, c.arguments) for c in f.tool_calls] == [
        ("wx1", "get_current_weather", '{"location":"Tokyo","format":"celsius"}')]
    assert f.finish_reason == "tool_calls"


def test_16_3_preamble_is_user_visible() -> None:
    f = both("spec_16_3_preamble.ocml")
    assert f.preamble == "**Plan:** 1) Search docs 2) Extract figures 3) Summarize."
    assert f.text == "" and f.reasoning == ""


def test_17_1_legacy_transcript_is_all_final() -> None:
    f = both("c1_legacy_1x.ocml")
    assert (f.text, f.finish_reason) == ("Hi! How can I help you today?", "stop")
    events = decode(last_turn("c1_legacy_1x.ocml"), False, require_channels=True)
    assert isinstance(events[-1], ev.Error) and events[-1].code == "E-PARSE-CHANNEL-MISSING"


def test_17_2_fully_channeled_with_return() -> None:
    f = both("c2_channeled_return.ocml", require_channels=True)
    assert (f.reasoning, f.text, f.finish_reason) == (
        "11 is prime and greater than 10.", "11 is a prime number greater than 10.", "stop")


def test_17_3_concurrent_calls_keep_their_header_ids() -> None:
    # One generation stops at the first <|call|> (a hard stop, HIP-1 §12.8); the model
    # requests a second call in the same turn by closing the first with <|end|>.
    turn = last_turn("c3_concurrent_calls.ocml")
    assert fold(decode(turn, False)).text == "Tokyo: 20 °C. Paris: 14 °C."
    text = OPENCHATML.joinpath("c3_concurrent_calls.ocml").read_text(encoding="utf-8")
    calls = re.findall(r"<\|start\|>assistant to=.*?<\|call\|>", text)
    output = calls[0].removeprefix("<|start|>assistant").replace("<|call|>", "<|end|>") + calls[1]
    f = fold(decode(output, True))
    assert [(c.call_id, c.arguments) for c in f.tool_calls] == [
        ("call_tokyo", '{"city":"Tokyo"}'), ("call_paris", '{"city":"Paris"}')]
    assert f.finish_reason == "tool_calls"


def test_17_4_answer_after_a_tool_error() -> None:
    f = both("c4_tool_error.ocml")
    assert f.text == "The archive search timed out; please try again."


def test_17_5_literal_block_containing_start() -> None:
    f = both("c5_literal_start.ocml")
    assert f.text == "Every message begins with <|start|> followed by the role."
    assert f.finish_reason == "stop"


def test_17_6_constraint_violation() -> None:
    for by_char in (False, True):
        events = decode(last_turn("c6_constraint_violation.ocml"), by_char)
        assert isinstance(events[-1], ev.Error)
        assert events[-1].code == "E-BODY-CONSTRAINT-VIOLATION"
        assert not any(isinstance(e, ev.ToolCallDone | ev.Finished) for e in events)


def test_17_7_harmony_preamble() -> None:
    f = both("c7_harmony_preamble.ocml", require_channels=True)
    assert f.reasoning == "Multi-step; tell the user the plan first."
    assert f.preamble == "Plan: 1) write index.html 2) start a server."
    assert [(c.call_id, c.name) for c in f.tool_calls] == [("f1", "write_file")]


@pytest.mark.parametrize("name", ["c8_legacy_functions_role.ocml", "c3_concurrent_calls.ocml"])
def test_17_8_a_tool_reply_in_the_output_ends_the_turn(name: str) -> None:
    text = OPENCHATML.joinpath(name).read_text(encoding="utf-8")
    start = text.index("<|start|>assistant to=")
    output = text[start:].removeprefix("<|start|>assistant").replace("<|call|>", "<|end|>")
    f = fold(decode(output, True))
    assert f.finish_reason == "tool_calls" and f.text == "" and f.error is None
