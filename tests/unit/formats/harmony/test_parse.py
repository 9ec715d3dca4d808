"""The token-level Harmony parser: channel mapping, finishes, and chunking invariance."""

from __future__ import annotations

import random

from app.api.chat.fold import Folded
from app.core import events as ev
from app.core.conversation import ToolChoice
from app.core.output import Chunk, Finish
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.render import prefill_ids
from app.formats.harmony.vocab import harmony_encoding

REASONING_TOOL = ("<|channel|>analysis<|message|>Need weather. Use tool.<|end|>"
                  "<|start|>assistant<|channel|>commentary<|message|>Checking ☀️ now.<|end|>"
                  "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                  '<|message|>{"city":"Zürich"}<|call|>')
FINAL = ("<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>"
         "2 + 2 = 4 🎉<|return|>")


def _ids(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special="all"))


def _parse(ids: list[int], groups: list[int] | None = None, finish: str = "eos",
           prefill: list[int] | None = None) -> list[ev.Event]:
    parser = HarmonyEventParser(prompt_tokens=10, prefill=tuple(prefill or ()))
    out: list[ev.Event] = []
    pos = 0
    for size in groups or [1] * len(ids):
        out += parser.feed(Chunk(token_ids=tuple(ids[pos:pos + size])))
        pos += size
    assert pos >= len(ids)
    out += parser.feed(Chunk(finish=Finish(finish)))  # type: ignore[arg-type]
    return out + parser.close()


def _fold(events: list[ev.Event]) -> Folded:
    f = Folded()
    for e in events:
        f.add(e)
    return f


def test_channels_map_to_events() -> None:
    events = _parse(_ids(REASONING_TOOL))
    f = _fold(events)
    assert f.reasoning == "Need weather. Use tool."
    assert f.preamble == "Checking ☀️ now."
    assert f.text == ""
    assert [(c.name, c.arguments) for c in f.tool_calls] == [("get_weather", '{"city":"Zürich"}')]
    assert f.finish_reason == "tool_calls" and f.error is None
    kinds = [type(e).__name__ for e in events if not isinstance(e, (ev.ReasoningDelta, ev.PreambleDelta,
                                                                    ev.ToolCallArgumentsDelta))]
    assert kinds == ["PartDone", "PartDone", "ToolCallStarted", "ToolCallDone", "Finished"]
    assert isinstance(events[-1], ev.Finished)


def test_final_answer_and_reasoning_tokens() -> None:
    events = _parse(_ids(FINAL))
    f = _fold(events)
    assert (f.reasoning, f.text, f.finish_reason) == ("Simple.", "2 + 2 = 4 🎉", "stop")
    assert f.usage.reasoning_tokens == len(harmony_encoding().encode("Simple."))
    assert f.usage.prompt_tokens == 10 and f.usage.completion_tokens == len(_ids(FINAL))


def test_any_chunking_gives_the_same_answer() -> None:
    rng = random.Random(11)
    for script in (REASONING_TOOL, FINAL):
        ids = _ids(script)
        reference = _fold(_parse(ids))
        for _ in range(200):
            groups: list[int] = []
            while sum(groups) < len(ids):
                groups.append(rng.randint(1, 6))
            got = _fold(_parse(ids, groups))
            assert (got.reasoning, got.preamble, got.text, got.finish_reason) == (
                reference.reasoning, reference.preamble, reference.text, reference.finish_reason)
            assert [(c.name, c.arguments) for c in got.tool_calls] == [
                (c.name, c.arguments) for c in reference.tool_calls]


def test_missing_stop_token_is_truncation_error() -> None:
    ids = _ids(FINAL)[:-1]  # drop <|return|>
    events = _parse(ids)
    assert isinstance(events[-1], ev.Error) and events[-1].code == "stream_truncated"
    assert not any(isinstance(e, ev.Finished) for e in events)
    parser = HarmonyEventParser(prompt_tokens=1)
    parser.feed(Chunk(token_ids=tuple(ids)))
    tail = parser.close()  # backend stream ended without any finish information
    assert isinstance(tail[-1], ev.Error) and tail[-1].code == "stream_truncated"


def test_length_finish_closes_open_text() -> None:
    ids = _ids(FINAL)[:-3]
    events = _parse(ids, finish="length")
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "length"
    assert isinstance(events[-2], ev.PartDone) and events[-2].kind == "text"


def test_unknown_channel_is_hidden_and_builtin_recipient_is_an_error() -> None:
    f = _fold(_parse(_ids("<|channel|>secret<|message|>hidden<|end|><|start|>assistant<|channel|>final"
                          "<|message|>shown<|return|>")))
    assert (f.reasoning, f.text) == ("hidden", "shown")
    events = _parse(_ids('<|channel|>analysis to=browser.search <|constrain|>json<|message|>{}<|call|>'))
    errors = [e for e in events if isinstance(e, ev.Error)]
    assert [e.code for e in errors] == ["unsupported_recipient"]
    assert not any(isinstance(e, (ev.ToolCallStarted, ev.Finished)) for e in events)


def test_tokens_after_the_stop_token_are_ignored() -> None:
    ids = _ids(FINAL) + _ids("<|start|>assistant<|channel|>final<|message|>extra")
    f = _fold(_parse(ids))
    assert f.text == "2 + 2 = 4 🎉" and f.finish_reason == "stop"


def test_named_tool_prefill_starts_the_call() -> None:
    enc = harmony_encoding()
    prefill = prefill_ids(enc, ToolChoice("required", ("get_weather",)))
    events = _parse(_ids('{"city":"Paris"}<|call|>'), prefill=prefill)
    assert isinstance(events[0], ev.ToolCallStarted) and events[0].name == "get_weather"
    f = _fold(events)
    assert f.tool_calls[0].arguments == '{"city":"Paris"}' and f.finish_reason == "tool_calls"
    events = _parse(_ids('.get_weather <|constrain|>json<|message|>{}<|call|>'),
                    prefill=prefill_ids(enc, ToolChoice("required")))
    assert _fold(events).tool_calls[0].name == "get_weather"


def test_a_final_message_with_a_content_type_is_the_answer() -> None:
    # gpt-oss writes "<|constrain|>json" after "final" for a structured answer; openai-harmony's
    # header rule reads that content type as the recipient, which is not a tool being called.
    text = '<|channel|>analysis<|message|>JSON.<|end|><|start|>assistant<|channel|>final <|constrain|>json' \
           '<|message|>{"a": 1}<|return|>'
    f = _fold(_parse(_ids(text)))
    assert (f.reasoning, f.text, f.finish_reason, f.error) == ("JSON.", '{"a": 1}', "stop", None)
