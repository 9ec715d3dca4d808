"""Where a chat-template model's answer starts (``app/formats/template/answer.py``): a tool
call after the reasoning is recognized exactly as one at the start of the output, however the
output is chunked; only an answer is cut and generated again under the schema."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.answer import HOLD, RESTART
from app.core.output import Chunk, Finish
from app.formats.template.analysis.analysis import analyze
from app.formats.template.answer import TemplateAnswerWatch, call_triggers
from tests.support.paths import FIXTURES

QWQ = analyze((FIXTURES / "templates" / "Qwen-QwQ-32B.jinja").read_text())
HERMES = analyze((FIXTURES / "templates" / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja").read_text())
OPEN = "<|im_start|>assistant\n<think>\n"  # QwQ's prompt opens the reasoning
CLOSED = "<|im_start|>assistant\n<think>\n</think>"  # ... or closes it (thinking off)
THINK = "The user wants the weather.\nCall the tool."
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

_WS = st.text(st.sampled_from(" \n\t"), max_size=4)
_SENTENCE = st.text(st.sampled_from("abc XY.,!?\n"), max_size=120)
_ANSWER = st.one_of(st.just('{"a": 1}'), st.just("[1]"), st.just("It is sunny."),
                    st.text(st.sampled_from("ab <>{}[]\n_/tool"), min_size=1, max_size=40))
# pieces the text after the reasoning is made of: calls, their fragments, JSON, words
_PIECES = st.lists(st.sampled_from(["<tool_call>", "<tool", "_call>", "<", "{", "[", '{"a": 1}', "\n",
                                    " ", "Let me check.", "</tool_call>", "x" * 60, "</think>"]),
                   max_size=8).map("".join)


def _chunks(text: str, cuts: list[int]) -> list[Chunk]:
    bounds = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [Chunk(text=text[a:b], token_ids=(1,) * max(b - a, 1)) for a, b in itertools.pairwise(bounds)]


def _run(watch: TemplateAnswerWatch, chunks: list[Chunk]) -> tuple[str, bool]:
    """The text passed on unconstrained, and whether the rest was constrained (the loop of
    ``app/engine/constrained.py``)."""
    passed: list[Chunk] = []
    held: list[Chunk] = []
    for chunk in [*chunks, Chunk(finish=Finish("eos"))]:
        cut = watch.feed(chunk)
        if cut == HOLD and chunk.finish is None:
            held.append(chunk)
            continue
        if cut is None or cut == HOLD:
            passed += [*held, chunk]
            held = []
            continue
        if cut != RESTART:
            assert cut == len(chunk.token_ids)  # always after a whole chunk
            passed += [*held, chunk]
        return "".join(c.text for c in passed), True
    return "".join(c.text for c in passed + held), False


@settings(max_examples=300, deadline=None)
@given(_WS, _SENTENCE, st.lists(st.integers(0, 400), max_size=12))
def test_a_call_after_reasoning_is_never_constrained(ws: str, sentence: str, cuts: list[int]) -> None:
    lead = sentence.strip() + "\n" if sentence.strip() else ""
    output = f"{THINK}</think>{ws}{lead}{CALL}"
    assert _run(TemplateAnswerWatch(QWQ, OPEN, tools=True), _chunks(output, cuts)) == (output, False)
    opened = f"<think>{THINK}</think>{ws}{lead}{CALL}"  # the output opens the reasoning itself
    assert _run(TemplateAnswerWatch(QWQ, "<|im_start|>assistant\n", tools=True),
                _chunks(opened, cuts)) == (opened, False)


REASONING_WITH_CALLS = [p for p in sorted((FIXTURES / "templates").glob("*.jinja"))
                        if analyze(p.read_text()).reasoning.end and call_triggers(analyze(p.read_text()))]


@pytest.mark.parametrize("path", REASONING_WITH_CALLS, ids=lambda p: p.stem)
@settings(max_examples=60, deadline=None)
@given(ws=_WS, cuts=st.lists(st.integers(0, 300), max_size=10))
def test_every_reasoning_template_runs_a_call_after_its_reasoning(path: Path, ws: str,
                                                                  cuts: list[int]) -> None:
    """Whatever the template's markers (implicit-open reasoning included: the prompt ends with
    the start marker), its call after the end marker is passed on, never cut."""
    a = analyze(path.read_text())
    output = f"Think.{a.reasoning.end}{ws}{call_triggers(a)[0]}get_weather" + '{"city": "Paris"}'
    got = _run(TemplateAnswerWatch(a, f"user turn{a.reasoning.start}", tools=True), _chunks(output, cuts))
    assert got == (output, False)


@settings(max_examples=300, deadline=None)
@given(_WS, _ANSWER, st.lists(st.integers(0, 400), max_size=12))
def test_an_answer_after_reasoning_is_constrained_from_the_end_of_reasoning(
        ws: str, answer: str, cuts: list[int]) -> None:
    head = f"{THINK}</think>"
    output = head + ws + answer.replace("<tool_call>", "")
    passed, constrained = _run(TemplateAnswerWatch(QWQ, OPEN, tools=True), _chunks(output, cuts))
    assert constrained
    assert passed.startswith(head)
    if len(head) in {c % (len(output) + 1) for c in cuts}:  # </think> ends a chunk
        assert passed == head


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=4), _PIECES, st.lists(st.integers(0, 200), max_size=8))
def test_after_reasoning_exactly_as_at_the_start(think_cuts: list[int], rest: str, cuts: list[int]) -> None:
    """The same text after ``</think>`` and at the start of an output whose prompt closed
    the reasoning: the same decision, the same text passed on."""
    head = f"{THINK}</think>"
    after = _run(TemplateAnswerWatch(QWQ, OPEN, tools=True), _chunks(head, think_cuts) + _chunks(rest, cuts))
    start = _run(TemplateAnswerWatch(QWQ, CLOSED, tools=True), _chunks(rest, cuts))
    assert after[0].startswith(head)
    assert (after[0][len(head):], after[1]) == start
    hermes = _run(TemplateAnswerWatch(HERMES, "<|im_start|>assistant\n", tools=True), _chunks(rest, cuts))
    assert hermes == start  # and as on a template without reasoning


def test_without_tools_the_answer_starts_right_after_the_reasoning() -> None:
    watch = TemplateAnswerWatch(QWQ, OPEN, tools=False)
    assert watch.feed(Chunk(text="hmm", token_ids=(1,))) is None
    assert watch.feed(Chunk(text="</think>", token_ids=(2,))) == 1
    assert watch.feed(Chunk(text="\n\n", token_ids=(3,))) is None  # done: the rest is constrained


def test_the_bound_on_text_before_a_call() -> None:
    """A long preface is the answer: dropped and generated again, not waited on forever."""
    watch = TemplateAnswerWatch(QWQ, CLOSED, tools=True)
    results = [watch.feed(Chunk(text="word ", token_ids=(1,))) for _ in range(100)]
    assert RESTART in results and results.index(RESTART) < 60
    assert set(results[:results.index(RESTART)]) == {HOLD}


def test_an_empty_answer_after_reasoning_is_generated_under_the_schema() -> None:
    passed, constrained = _run(TemplateAnswerWatch(QWQ, OPEN, tools=True),
                               [Chunk(text="x", token_ids=(1,)), Chunk(text="</think>", token_ids=(2,)),
                                Chunk(text="\n\n", token_ids=(3,))])
    assert (passed, constrained) == ("x</think>", True)
