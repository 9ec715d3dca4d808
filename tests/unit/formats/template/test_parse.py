"""The analysis-built TextDecoder: chunking, held-back markers, finishes, argument typing."""

from __future__ import annotations

import json
import random

import pytest

from app.core import events as ev
from app.core.conversation import FunctionTool
from app.core.output import Chunk, Finish
from app.formats.parsing.text import TextEventParser
from app.formats.template.analysis.analysis import analyze
from app.formats.template.parse import TemplateDecoder
from tests.unit.formats.template.analysis.roundtrip import TEMPLATES

TOOLS = (FunctionTool("f", None, {"type": "object", "properties": {
    "s": {"type": "string"}, "n": {"type": "integer"}, "o": {"type": "object"}}}),)


def _decoder(name: str, prompt: str = "", tools: tuple[FunctionTool, ...] = TOOLS,
             eos: str = "") -> TemplateDecoder:
    return TemplateDecoder(analyze((TEMPLATES / f"{name}.jinja").read_text()), tools, prompt, eos)


def _feed(dec: TemplateDecoder, text: str, sizes: list[int] | None = None,
          end: str = "eos") -> tuple[list[ev.Event], ev.FinishReason | None]:
    events: list[ev.Event] = []
    i = 0
    for k in sizes or [len(text)]:
        events += dec.decode(text[i:i + k])
        i += k
    events += dec.decode(text[i:])
    tail, reason = dec.flush(end)  # type: ignore[arg-type]
    return events + tail, reason


def _joined(events: list[ev.Event]) -> tuple[str, str, list[tuple[str, object]]]:
    return ("".join(e.text for e in events if isinstance(e, ev.ReasoningDelta)),
            "".join(e.text for e in events if isinstance(e, ev.TextDelta)),
            [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ev.ToolCallDone)])


QWEN_CALL = ("<tool_call>\n<function=f>\n<parameter=s>\n007\n</parameter>\n<parameter=n>\n7\n"
             "</parameter>\n<parameter=o>\n{'a': True}\n</parameter>\n</function>\n</tool_call>")


def test_tagged_arguments_are_typed_by_schema() -> None:
    events, reason = _feed(_decoder("Qwen3-Coder"), "Sure." + QWEN_CALL)
    assert _joined(events) == ("", "Sure.", [("f", {"s": "007", "n": 7, "o": {"a": True}})])
    assert reason == "tool_calls"
    # without a schema, values that parse as JSON are JSON
    events, _ = _feed(_decoder("Qwen3-Coder", tools=()), QWEN_CALL.replace("{'a': True}", "[1]"))
    assert _joined(events)[2] == [("f", {"s": "007", "n": 7, "o": [1]})]  # 007 is not JSON


def test_every_split_point_gives_the_same_events() -> None:
    text = "<think>\nhmm <b>\n</think>\n\nHi <tool_ there." + QWEN_CALL
    dec = _decoder("GLM-4.6")
    whole = _joined(_feed(dec, text)[0])
    glm = ("<think>plan</think>ok<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>x y</arg_value>\n"
           "<arg_key>n</arg_key>\n<arg_value>2</arg_value>\n</tool_call>")
    expected = _joined(_feed(_decoder("GLM-4.6"), glm)[0])
    assert expected == ("plan", "ok", [("f", {"s": "x y", "n": 2})])
    for cut in range(1, len(glm)):
        assert _joined(_feed(_decoder("GLM-4.6"), glm, [cut])[0]) == expected, cut
    assert whole[0] == "hmm <b>"


def test_events_are_ordered_and_parts_closed() -> None:
    events, _ = _feed(_decoder("MiniMax-M2", prompt="]~b]ai\n<think>\n"),
                      "because\n</think>\n\nAnswer.\n<minimax:tool_call>\n<invoke name=\"f\">\n"
                      "<parameter name=\"s\">v</parameter>\n</invoke>\n</minimax:tool_call>")
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ReasoningDelta", "PartDone", "TextDelta", "PartDone", "ToolCallStarted",
                     "ToolCallArgumentsDelta", "ToolCallDone"]
    started = next(e for e in events if isinstance(e, ev.ToolCallStarted))
    done = next(e for e in events if isinstance(e, ev.ToolCallDone))
    assert (started.index, started.name, started.call_id) == (0, "f", done.call_id)
    assert done.arguments == '{"s": "v"}'


def test_partial_marker_is_held_back_then_released_as_text() -> None:
    dec = _decoder("Qwen3-Coder")
    assert _joined(dec.decode("a <tool_c")) == ("", "a", [])
    events, reason = dec.flush("eos")
    assert _joined(events)[1] == " <tool_c" and reason == "stop"


@pytest.mark.parametrize(("end", "reason"), [("eos", "stop"), ("stop_string", "stop"),
                                             ("length", "length"), ("closed", None)])
def test_finish_reasons(end: str, reason: str | None) -> None:
    assert _feed(_decoder("Qwen3-Coder"), "hello", end=end)[1] == reason


def test_end_marker_in_text_stops() -> None:
    dec = _decoder("Qwen3-Coder")
    events = dec.decode("done<|im_end|>ignored")
    assert dec.stopped == "stop" and _joined(events)[1] == "done"
    assert dec.flush("closed")[1] == "stop"
    dec = _decoder("mistralai-Mistral-Nemo-Instruct-2407", eos="</s>")
    dec.decode('[TOOL_CALLS][{"name": "f", "arguments": {}, "id": "abcdefghi"}]</s>')
    assert dec.stopped == "tool_calls"


def test_python_dict_arguments_and_array_wrapping() -> None:
    text = "<tool_calls>[{\"name\": \"f\", \"arguments\": {'s': 'it\\'s', 'n': None}}]</tool_calls>"
    events, reason = _feed(_decoder("unsloth-Apriel-1.5"), text)
    assert _joined(events)[2] == [("f", {"s": "it's", "n": None})] and reason == "tool_calls"


def test_json_ids_are_kept_and_bare_json_needs_the_start() -> None:
    events, _ = _feed(_decoder("mistralai-Mistral-Nemo-Instruct-2407"),
                      '[TOOL_CALLS][{"name": "f", "arguments": {"n": 1}, "id": "abcdefghi"}]')
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [(d.call_id, d.arguments) for d in done] == [("abcdefghi", '{"n": 1}')]
    llama = _decoder("meta-llama-Llama-3.2-3B-Instruct")
    assert _joined(_feed(llama, '{"name": "f", "parameters": {"n": 1}}')[0])[2] == [("f", {"n": 1})]
    text = 'Use {"name": "f"} like this.'
    assert _joined(_feed(_decoder("meta-llama-Llama-3.2-3B-Instruct"), text)[0]) == ("", text, [])


def test_call_id_between_name_and_arguments_is_optional() -> None:
    dec = _decoder("Mistral-Small-3.2-24B-Instruct-2506")
    events, _ = _feed(dec, '[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{"n": 1}[TOOL_CALLS]f[ARGS]{}')
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert (done[0].call_id, done[0].arguments) == ("abc123XYZ", '{"n": 1}')
    assert done[1].call_id.startswith("call_") and done[1].index == 1


def test_forced_open_reasoning_starts_from_the_prompt() -> None:
    dec = _decoder("llama-cpp-deepseek-r1", prompt="<｜Assistant｜><think>\n")
    events, _ = _feed(dec, "deep thought\n</think>\n\nThe answer.")
    assert _joined(events)[:2] == ("deep thought", "The answer.")
    # the same decoder without the forced tag accepts an optional <think> block
    events, _ = _feed(_decoder("llama-cpp-deepseek-r1"), "<think>x</think>y")
    assert _joined(events)[:2] == ("x", "y")


def test_broken_tool_call_is_an_error() -> None:
    events, reason = _feed(_decoder("deepseek-ai-DeepSeek-V3.1"),
                           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>not json")
    assert any(isinstance(e, ev.Error) and e.code == "tool_call_parse_error" for e in events)
    assert reason is None
    events, reason = _feed(_decoder("deepseek-ai-DeepSeek-V3.1"),
                           '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{"n": ', end="eos")
    assert any(isinstance(e, ev.Error) for e in events) and reason is None


def test_unclosed_tagged_call_completes_on_eos() -> None:
    events, reason = _feed(_decoder("ByteDance-Seed-OSS"),
                           "<seed:tool_call>\n<function=f>\n<parameter=n>5</parameter>\n")
    assert _joined(events)[2] == [("f", {"n": 5})] and reason == "tool_calls"


def test_random_chunkings_through_the_pipeline_wrapper() -> None:
    text = ("<seed:think>a\nb</seed:think>\nText <b>.\n\n<seed:tool_call>\n<function=f>\n"
            "<parameter=s>x</parameter>\n</function>\n</seed:tool_call>")
    rnd = random.Random(7)
    reference = None
    for _ in range(30):
        parser = TextEventParser(_decoder("ByteDance-Seed-OSS"), prompt_tokens=3)
        events: list[ev.Event] = []
        i = 0
        while i < len(text):
            k = rnd.randint(1, 6)
            events += parser.feed(Chunk(text=text[i:i + k]))
            i += k
        events += parser.feed(Chunk(finish=Finish("eos")))
        events += parser.close()
        got = (_joined(events), type(events[-1]).__name__, getattr(events[-1], "reason", None))
        assert got == (reference or got)
        reference = got
    assert reference == (("a\nb", "Text <b>.", [("f", {"s": "x"})]), "Finished", "tool_calls")


def test_template_decoder_reads_the_prompt_tail_from_trusted_text_only() -> None:
    from app.formats.template.parse import template_decoder

    source = (TEMPLATES / "llama-cpp-deepseek-r1.jinja").read_text()
    def forced() -> TemplateDecoder:
        return template_decoder(source, (("<｜Assistant｜><think>\n", True),))

    def spoofed() -> TemplateDecoder:
        return template_decoder(source, (("<｜User｜>", True), ("<think>\n", False)))

    assert _joined(_feed(forced(), "x</think>y")[0])[:2] == ("x", "y")
    assert _joined(_feed(forced(), "x")[0])[:2] == ("x", "")  # opened by the prompt
    assert _joined(_feed(spoofed(), "x")[0])[:2] == ("", "x")  # client text opened nothing
    # ... but an end-of-reasoning marker is never part of the answer (see the next test)
    assert _joined(_feed(spoofed(), "x</think>y")[0])[:2] == ("x", "y")


@pytest.mark.parametrize("sizes", [None, [1] * 60, [2, 5, 3] * 20])
@pytest.mark.parametrize("finish", ["eos", "length"])
def test_reasoning_without_its_opening_marker_never_shows_as_the_answer(
        sizes: list[int] | None, finish: str) -> None:
    """A FORCED_OPEN template whose rendered prompt did not open reasoning (R1 distills that
    leave out ``<think>``): output up to ``</think>`` is held and then shown as reasoning, never
    as content, in any chunking; without an end marker it was the answer, unless the token
    budget cut it (then it is the reasoning that was cut)."""
    from app.formats.template.parse import template_decoder

    source = (TEMPLATES / "llama-cpp-deepseek-r1.jinja").read_text()
    out = "Let me think. 2+2 is 4.\n</think>\n\nThe answer is 4."
    events, reason = _feed(template_decoder(source, (("<｜Assistant｜>", True),)), out, sizes,
                           end=finish)
    assert _joined(events)[:2] == ("Let me think. 2+2 is 4.", "The answer is 4.")
    assert not any(isinstance(e, ev.TextDelta) and "think" in e.text for e in events)
    events, reason = _feed(template_decoder(source, (("<｜Assistant｜>", True),)), "Just 4.",
                           sizes, end=finish)
    assert _joined(events)[:2] == (("", "Just 4.") if finish == "eos" else ("Just 4.", ""))
    assert reason == ("stop" if finish == "eos" else "length")


@pytest.mark.parametrize("sizes", [None, [3], [10, 1], [1] * 40])
def test_text_before_a_content_marker_in_the_same_buffer_loses_nothing(sizes: list[int] | None) -> None:
    """Command R7B: the characters after <|START_RESPONSE|> were cut by the length of whatever
    preceded the marker in the same buffer ("he answer is 42.")."""
    name = "CohereForAI-c4ai-command-r7b-12-2024-tool_use"
    text = "Sure.<|START_RESPONSE|>The answer is 42.<|END_RESPONSE|>"
    events, _ = _feed(_decoder(name), text, sizes)
    assert _joined(events)[1] == "Sure.The answer is 42."


@pytest.mark.parametrize(("name", "call"), [
    ("Qwen3-Coder", "<tool_call>\n<function=f>\n<parameter=s>\n{v}\n</parameter>\n</function>\n"
                    "</tool_call>"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
     '<tool_call>\n{{"name": "f", "arguments": {{"s": "{v}"}}}}\n</tool_call>'),
])
def test_a_long_argument_is_read_once_not_rescanned_per_chunk(name: str, call: str) -> None:
    """A value being read leaves the buffer as it is scanned: the buffer stays a few characters
    long (not the whole value so far), which is what keeps the work linear; the result is the
    same in any chunking, markers split anywhere included."""
    value = "".join(f"line {i} </param <parameter \\u00e9 {{}} " for i in range(400))
    text = "Sure." + call.format(v=value)
    rng = random.Random(7)
    whole, _ = _feed(_decoder(name), text)
    dec = _decoder(name)
    events: list[ev.Event] = []
    longest, i = 0, 0
    while i < len(text):
        k = rng.randint(1, 9)
        events += dec.decode(text[i:i + k])
        longest = max(longest, len(dec._buf))
        i += k
    tail, reason = dec.flush("eos")
    assert reason == "tool_calls"
    assert _joined(events + tail) == _joined(whole)
    assert json.loads(next(e for e in whole if isinstance(e, ev.ToolCallDone)).arguments)["s"] \
        == (value if name == "Qwen3-Coder" else json.loads(f'"{value}"'))
    assert longest < 40, longest


def test_smollm3_thinking_comes_back_as_reasoning() -> None:
    """SmolLM3's switch writes /think or /no_think into the system turn as well as closing an
    empty block in the generation prompt: its reasoning is found all the same."""
    events, reason = _feed(_decoder("HuggingFaceTB-SmolLM3-3B", "<|im_start|>assistant\n"),
                           "<think>\nFirst, 2+2.\n</think>\nIt is 4.", [1] * 45)
    assert _joined(events)[:2] == ("First, 2+2.", "It is 4.") and reason == "stop"


@pytest.mark.parametrize("tail", ["\n</tool_calls>", "</tool_calls>\n", "<|calls_end|>", "[/TOOL_CALLS]"])
def test_a_lone_marker_after_the_last_call_ends_the_section(tail: str) -> None:
    # Qwen3-Coder's template never writes a section end; a model that does (as templates that
    # close the section only after several calls teach it) must not leak it as the answer.
    text = "Sure." + QWEN_CALL + tail
    expected = ("", "Sure.", [("f", {"s": "007", "n": 7, "o": {"a": True}})])
    for cut in range(1, len(text)):
        events, reason = _feed(_decoder("Qwen3-Coder"), text, [cut])
        assert (_joined(events), reason) == (expected, "tool_calls"), cut


def test_text_after_the_last_call_is_still_text() -> None:
    for tail in ("\n</tool_calls> and more", "\n<b>bold</b>", "\nDone."):
        text = QWEN_CALL + tail
        for cut in (None, [len(QWEN_CALL) + 3], [len(text) - 2]):
            events, _ = _feed(_decoder("Qwen3-Coder"), text, cut)
            assert _joined(events)[1] == tail.lstrip(), (tail, cut)
