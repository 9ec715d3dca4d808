"""The OpenChatML text decoder: tokens across chunks, header grammar, escapes, literal
blocks, channel policy, finishes and the §14 error codes."""

from __future__ import annotations

import pytest

from app.api.chat.fold import Folded
from app.core import events as ev
from app.core.output import Chunk, Finish
from app.formats.openchatml.parse import OpenChatMLDecoder
from app.formats.parsing.text import TextEventParser
from tests.unit.formats.openchatml.test_hip1 import normalize


def run(text: str, finish: str | None = "eos", chunks: int = 0, **options: object) -> list[ev.Event]:
    """Output text through the pipeline wrapper; ``chunks=1`` feeds it char by char."""
    parser = TextEventParser(OpenChatMLDecoder(**options), prompt_tokens=1)  # type: ignore[arg-type]
    pieces = list(text) if chunks == 1 else [text]
    events: list[ev.Event] = []
    for piece in pieces:
        events += parser.feed(Chunk(text=piece))
    if finish is not None:
        events += parser.feed(Chunk(finish=Finish(finish)))  # type: ignore[arg-type]
    return events + parser.close()


def fold(events: list[ev.Event]) -> Folded:
    f = Folded()
    for e in events:
        f.add(e)
    return f


def error_code(events: list[ev.Event]) -> str | None:
    last = events[-1]
    return last.code if isinstance(last, ev.Error) else None


RICH = ("<|channel|>analysis<|message|>Think <<|end|> then <|literal|><|return|><|endliteral|>."
        "<|end|><|start|>assistant intent=preamble<|channel|>commentary<|message|>Plan ☀️<|end|>"
        "<|start|>assistant to=functions.get_weather call_id=wx1 name=weather"
        "<|channel|>commentary<|constrain|>json<|message|>{\"city\":\"Zürich\"}<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done <-> a<|b <|return|>")


def test_channels_escapes_and_literal_blocks_map_to_events() -> None:
    f = fold(run(RICH))
    assert f.reasoning == "Think <|end|> then <|return|>."
    assert f.preamble == "Plan ☀️"
    assert [(c.call_id, c.name, c.arguments) for c in f.tool_calls] == [
        ("wx1", "get_weather", '{"city":"Zürich"}')]
    assert f.text == "Done <-> a<|b "
    assert f.finish_reason == "stop" and f.error is None


def test_every_split_point_gives_the_same_events() -> None:
    reference = normalize(run(RICH))
    assert normalize(run(RICH, chunks=1)) == reference
    for cut in range(1, len(RICH)):
        parser = TextEventParser(OpenChatMLDecoder(), prompt_tokens=1)
        events = parser.feed(Chunk(text=RICH[:cut])) + parser.feed(Chunk(text=RICH[cut:]))
        events += parser.feed(Chunk(finish=Finish("eos"))) + parser.close()
        assert normalize(events) == reference, cut


def test_only_a_possible_token_prefix_is_held_back() -> None:
    d = OpenChatMLDecoder()
    assert d.decode("<|channel|>final<|message|>") == []
    assert d.decode("a < b <x") == [ev.TextDelta("a < b <x")]
    assert d.decode("c <|ret") == [ev.TextDelta("c ")]
    assert d.decode("ro") == [ev.TextDelta("<|retro")]
    assert d.decode("<<") == []  # could still be the escape '<<|end|>'
    assert d.decode("|end|> e<") == [ev.TextDelta("<|end|>"), ev.TextDelta(" e")]
    assert d.decode("|end|>") == [ev.PartDone("text")]
    assert d.stopped is None


def test_text_after_a_stop_token_is_ignored() -> None:
    d = OpenChatMLDecoder()
    events = d.decode("<|channel|>final<|message|>hi<|return|><|start|>assistant<|channel|>final")
    assert events == [ev.TextDelta("hi"), ev.PartDone("text")] and d.stopped == "stop"
    assert d.decode("<|message|>more") == []


@pytest.mark.parametrize(("header", "kind"), [
    ("<|channel|>analysis", "reasoning"),
    ("<|channel|>commentary", "preamble"),
    (" intent=preamble<|channel|>commentary", "preamble"),
    ("<|channel|>commentary intent=preamble", "preamble"),
    (" intent=debug<|channel|>commentary", "reasoning"),
    ("<|channel|>commentary intent=status", "reasoning"),
    ("<|channel|>commentary to=assistant", "preamble"),
    ("<|channel|>final", "text"),
    (" content_type=markdown<|channel|>final", "text"),
    ("", "text"),  # no channel: final (1.x back-compat)
])
def test_channel_and_intent_policy(header: str, kind: str) -> None:
    events = run(f"{header}<|message|>x<|end|>")
    delta = {"reasoning": ev.ReasoningDelta, "preamble": ev.PreambleDelta,
             "text": ev.TextDelta}[kind]
    assert events[:2] == [delta("x"), ev.PartDone(kind)]  # type: ignore[arg-type]
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "stop"


@pytest.mark.parametrize("header", [
    " to=functions.lookup call_id=c-9",            # canonical: start header
    "<|channel|>commentary to=functions.lookup",   # HIP-1: after the channel tag
    " to=lookup<|channel|>commentary json",        # bare Harmony content type
    " to=functions.lookup<|constrain|>json",       # constrain without a channel
])
def test_tool_call_headers(header: str) -> None:
    events = run(f"{header}<|message|>{{}}<|call|>")
    started = events[0]
    assert isinstance(started, ev.ToolCallStarted) and started.name == "lookup"
    assert started.call_id == "c-9" if "call_id" in header else started.call_id.startswith("call_")
    assert events[1:] == [ev.ToolCallArgumentsDelta(0, "{}"),
                          ev.ToolCallDone(0, started.call_id, "lookup", "{}"), events[-1]]
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "tool_calls"


def test_two_calls_in_one_turn_are_indexed_from_zero() -> None:
    text = (" to=functions.a call_id=c1<|channel|>commentary<|message|>{\"x\":1}<|end|>"
            "<|start|>assistant to=functions.b call_id=c2<|channel|>commentary<|message|>{}<|call|>")
    f = fold(run(text, chunks=1))
    assert [(c.call_id, c.name, c.arguments) for c in f.tool_calls] == [("c1", "a", '{"x":1}'),
                                                                   ("c2", "b", "{}")]
    done = [e for e in run(text) if isinstance(e, ev.ToolCallDone)]
    assert [d.index for d in done] == [0, 1] and f.finish_reason == "tool_calls"


def test_prefill_opens_the_forced_call() -> None:
    d = OpenChatMLDecoder(prefill=" to=functions.get_weather<|channel|>commentary"
                                  "<|constrain|>json<|message|>")
    events = d.decode('{"city":"Paris"}<|call|>')
    assert isinstance(events[0], ev.ToolCallStarted) and events[0].name == "get_weather"
    assert d.stopped == "tool_calls"
    d = OpenChatMLDecoder(prefill=" to=functions")  # tool_choice required, no name
    events = d.decode(".f<|channel|>commentary<|message|>{}<|call|>")
    assert isinstance(events[0], ev.ToolCallStarted) and events[0].name == "f"


def test_another_role_ends_the_assistant_turn() -> None:
    events = run("<|channel|>final<|message|>hi<|end|><|start|>user<|message|>more<|end|>",
                 finish=None)
    assert fold(events).text == "hi" and fold(events).finish_reason == "stop"
    events = run(" to=functions.f<|channel|>commentary<|message|>{}<|end|>"
                 "<|start|>functions.f to=assistant<|channel|>commentary<|message|>{}<|end|>")
    assert fold(events).finish_reason == "tool_calls" and len(fold(events).tool_calls) == 1


def test_a_repeated_start_of_the_prompt_is_tolerated() -> None:
    f = fold(run("<|start|>assistant<|channel|>final<|message|>ok<|return|>"))
    assert f.text == "ok" and f.error is None


def test_backend_finishes() -> None:
    # llama.cpp strips the EOG token: "eos" closes the open message like its stop token
    f = fold(run("<|channel|>final<|message|>hi"))
    assert (f.text, f.finish_reason) == ("hi", "stop")
    f = fold(run(" to=functions.f<|channel|>commentary<|message|>{}", finish="stop_string"))
    assert f.finish_reason == "tool_calls" and f.tool_calls[0].arguments == "{}"
    f = fold(run(" to=functions.f<|channel|>commentary<|message|>{}<|end|>"
                 "<|start|>assistant<|channel|>final<|message|>and an answer"))
    assert f.finish_reason == "stop" and f.text == "and an answer" and len(f.tool_calls) == 1
    events = run("<|channel|>final<|message|>hi", finish="length")
    assert events[-2:-1] == [ev.PartDone("text")]
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "length"
    # at a message boundary eos ends the turn; nothing at all is an empty answer
    assert fold(run("<|channel|>analysis<|message|>r<|end|>")).finish_reason == "stop"
    empty = run("")
    assert len(empty) == 1 and isinstance(empty[0], ev.Finished) and empty[0].reason == "stop"


@pytest.mark.parametrize(("text", "finish"), [
    ("<|channel|>final<|message|>hi", None),             # stream closed, no finish at all
    ("<|channel|>fin", "eos"),                           # inside a header
    ("<|channel|>final<|message|><|literal|>x", "eos"),  # inside a literal block
    ("<|channel|>final<|message|>a<|end|><|start|>assistant", "eos"),
])
def test_truncated_streams(text: str, finish: str | None) -> None:
    events = run(text, finish=finish)
    assert error_code(events) == "E-STREAM-TRUNCATED"
    assert not any(isinstance(e, ev.Finished) for e in events)


@pytest.mark.parametrize("text", [
    "<|channel|>summary<|message|>x<|end|>",                     # unknown channel
    "<|channel|>final colour=red<|message|>x<|end|>",            # unknown attribute
    " call_id=a call_id=b<|channel|>final<|message|>x<|end|>",   # duplicate attribute
    " to=functions.f<|channel|>commentary to=functions.g<|message|>{}<|call|>",
    "<|channel|>final<|end|>",                                   # stop token in a header
    "<|channel|>final<|channel|>final<|message|>x<|end|>",
    "<|channel|>final<|message|>a<|end|>junk<|start|>assistant<|channel|>final<|message|>b",
    "<|channel|>final<|message|>a<|end|><|start|>robot<|message|>b<|end|>",
    "to=functions.f<|channel|>commentary<|message|>{}<|call|>",  # no space after the role
    " to=functions.<bad><|channel|>commentary<|message|>{}<|call|>",
    "<|channel|>final " + "x" * 600 + "<|message|>",
])
def test_malformed_headers(text: str) -> None:
    for chunks in (0, 1):
        events = run(text, chunks=chunks)
        assert error_code(events) == "E-PARSE-HEADER", events[-1]
        assert not any(isinstance(e, ev.Finished) for e in events)


def test_a_constrain_json_body_must_be_json() -> None:
    events = run(' to=functions.f<|channel|>commentary<|constrain|>json<|message|>{"a": oops}<|call|>')
    assert error_code(events) == "E-BODY-CONSTRAINT-VIOLATION"
    assert not any(isinstance(e, ev.ToolCallDone | ev.Finished) for e in events)
    ok = run(' to=functions.f<|channel|>commentary<|constrain|>json<|message|>{"a": 1}<|call|>')
    assert fold(ok).finish_reason == "tool_calls"
    # a content-type *hint* is not a constraint
    assert fold(run("<|channel|>final content_type=json<|message|>not json<|return|>")).error is None


def test_profile_requiring_channels() -> None:
    events = run("<|message|>hi<|end|>", require_channels=True)
    assert error_code(events) == "E-PARSE-CHANNEL-MISSING"
    assert fold(run("<|channel|>final<|message|>hi<|end|>", require_channels=True)).text == "hi"


def test_functions_only_recipients() -> None:
    events = run(" to=browser.search<|channel|>analysis<|message|>{}<|call|>",
                 recipients="functions")
    assert error_code(events) == "unsupported_recipient"
    assert fold(run(" to=browser.search<|channel|>analysis<|message|>{}<|call|>")) \
        .tool_calls[0].name == "browser.search"
