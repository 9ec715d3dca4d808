"""HIP-1 round trip: on every Harmony assistant output of the Harmony spec, the OpenChatML
text parser and the openai-harmony token parser produce the same events, however the
text is split into chunks.

Events are compared after the normalizations the two transports force: adjacent deltas
of one kind are joined (token-sized vs chunk-sized), tool call ids (random) are replaced
by their order of appearance, and ``Finished`` is compared by reason (token counts
differ by construction).
"""

from __future__ import annotations

import functools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.output import Chunk, Finish
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import harmony_encoding
from app.formats.openchatml.parse import OpenChatMLDecoder
from app.formats.parsing.text import TextEventParser
from tests.support.paths import FIXTURES

CORPUS = FIXTURES / "openchatml" / "hip1_outputs.txt"
Normalized = list[object]


def _load() -> dict[str, str]:
    examples: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in CORPUS.read_text(encoding="utf-8").split("\n"):
        if line.startswith("=== "):
            current = examples.setdefault(line[4:], [])
        elif current is not None:
            current.append(line)
    return {name: re.sub(r"(<\|(?:end|call|return)\|>)\n(?=<\|start\|>)", r"\1",
                         "\n".join(lines).rstrip("\n"))
            for name, lines in examples.items()}


EXAMPLES = _load()


def _finishes(text: str) -> tuple[str, ...]:
    """How the backend reports the end: after a stop token llama.cpp says ``eos``; an
    example that ends with ``<|end|>`` is a cut-off stream (``length``) or a backend stop
    string (``stop_string``); both parsers agree on those."""
    if "<|return|>" in text or "<|call|>" in text:
        return ("eos",)
    return ("length", "stop_string")


def normalize(events: list[ev.Event]) -> Normalized:
    out: Normalized = []
    ids: dict[str, str] = {}
    for e in events:
        item: object = e
        if isinstance(e, ev.Finished):
            item = ("Finished", e.reason)
        elif isinstance(e, ev.ToolCallStarted):
            item = ev.ToolCallStarted(e.index, ids.setdefault(e.call_id, f"id{len(ids)}"), e.name)
        elif isinstance(e, ev.ToolCallDone):
            item = ev.ToolCallDone(e.index, ids.setdefault(e.call_id, f"id{len(ids)}"), e.name,
                                   e.arguments)
        prev = out[-1] if out else None
        if isinstance(e, ev.ReasoningDelta | ev.PreambleDelta | ev.TextDelta) \
                and type(prev) is type(e):
            out[-1] = type(e)(prev.text + e.text)  # type: ignore[union-attr]
            continue
        if isinstance(e, ev.ToolCallArgumentsDelta) and isinstance(prev, ev.ToolCallArgumentsDelta):
            out[-1] = ev.ToolCallArgumentsDelta(e.index, prev.delta + e.delta)
            continue
        out.append(item)
    return out


@functools.cache
def harmony_events(name: str, finish: str) -> Normalized:
    ids = harmony_encoding().encode(EXAMPLES[name], allowed_special="all")
    parser = HarmonyEventParser(prompt_tokens=1)
    events: list[ev.Event] = []
    for tok in ids:
        events += parser.feed(Chunk(token_ids=(tok,)))
    events += parser.feed(Chunk(finish=Finish(finish)))  # type: ignore[arg-type]
    return normalize(events + parser.close())


def text_events(text: str, finish: str, cuts: list[int]) -> Normalized:
    parser = TextEventParser(OpenChatMLDecoder(recipients="functions"), prompt_tokens=1)
    events: list[ev.Event] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        if cut > prev:
            events += parser.feed(Chunk(text=text[prev:cut]))
            prev = cut
    events += parser.feed(Chunk(finish=Finish(finish)))  # type: ignore[arg-type]
    return normalize(events + parser.close())


CASES = [(name, finish) for name, text in EXAMPLES.items() for finish in _finishes(text)]


def test_corpus_covers_the_harmony_examples() -> None:
    assert len(EXAMPLES) == 26
    kinds = {type(e).__name__ for name, finish in CASES for e in harmony_events(name, finish)}
    # every event kind the parsers share is exercised, including the built-in tool error
    assert {"ReasoningDelta", "PreambleDelta", "TextDelta", "PartDone", "ToolCallStarted",
            "ToolCallArgumentsDelta", "ToolCallDone", "Error", "tuple"} <= kinds


@pytest.mark.parametrize(("name", "finish"), CASES)
def test_whole_text_every_single_split_and_every_character(name: str, finish: str) -> None:
    text = EXAMPLES[name]
    expected = harmony_events(name, finish)
    assert text_events(text, finish, []) == expected
    assert text_events(text, finish, list(range(1, len(text)))) == expected
    for cut in range(1, len(text)):
        assert text_events(text, finish, [cut]) == expected, cut


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_chunking_matches_the_token_parser(data: st.DataObject) -> None:
    name, finish = data.draw(st.sampled_from(CASES))
    text = EXAMPLES[name]
    cuts = data.draw(st.lists(st.integers(1, len(text) - 1), max_size=30))
    assert text_events(text, finish, cuts) == harmony_events(name, finish)


def test_builtin_recipients_are_calls_by_default() -> None:
    """The gateway default (``recipients="any"``) turns ``to=X`` into a call of tool X
    (the tool allow-list then decides); the Harmony parser reports it as unsupported."""
    text = EXAMPLES["21.4-python"]
    parser = TextEventParser(OpenChatMLDecoder(), prompt_tokens=1)
    events = normalize(parser.feed(Chunk(text=text, finish=Finish("eos"))) + parser.close())
    assert events[2:] == [ev.ToolCallStarted(0, "id0", "python"),
                          ev.ToolCallArgumentsDelta(0, "sum(i*i for i in range(1, 6))"),
                          ev.ToolCallDone(0, "id0", "python", "sum(i*i for i in range(1, 6))"),
                          ("Finished", "tool_calls")]
    assert any(isinstance(e, ev.Error) and e.code == "unsupported_recipient"
               for e in harmony_events("21.4-python", "eos"))
