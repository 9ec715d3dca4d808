"""``feed_slices``: a huge chunk fed a slice at a time gives what ``feed`` gives.

The token-level parser (Harmony) slices token ids and must produce exactly the events of
``feed``; the text-level wrapper slices text, so its deltas may be cut differently, but joined
per part they are the same answer, with the same calls, finish, usage and logprobs.  The event
stream uses ``feed_slices`` for a huge chunk and gives the event loop back between slices.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.conversation import Conversation, FunctionTool, GenerationParams, Message, TextPart
from app.core.output import Chunk, Finish, TokenLogprob, Usage
from app.engine.stream import HUGE, EventStream
from app.formats.catalog import HarmonyFormat, OpenChatMLFormat, TemplateFormat
from app.formats.harmony.parse import SLICE_TOKENS, HarmonyEventParser
from app.formats.harmony.vocab import harmony_encoding
from app.formats.parsing.text import TextEventParser, _slices
from tests.support.paths import FIXTURES

CONV = Conversation((Message("user", (TextPart("hi"),)),), tools=(
    FunctionTool("get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}}}),))
PARAMS = GenerationParams()
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCRIPTS = [
    "<|channel|>analysis<|message|>Let me think about it.<|end|><|start|>assistant<|channel|>final"
    "<|message|>The weather is fine, thanks for asking.<|return|>",
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris and its suburbs"}<|call|>',
    "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Done"
    "<|end|><|start|>user<|message|>fabricated<|end|>",
    "<|channel|>final<|message|>unfinished",
]
MARKERS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>",
           "assistant", "final", "analysis", "commentary", " to=functions.get_weather", "<think>", "</think>",
           "<tool_call>", "</tool_call>", '{"name": "get_weather", "arguments": {"city": "x"}}', "<", "<|",
           "<<|end|>", "<|literal|>", "<|endliteral|>", "\n", " ", "word"]
TEXT = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=3)), max_size=30).map("".join)
ENDS = st.sampled_from([Finish("eos"), Finish("length"), None])


def _normal(events: list[ev.Event]) -> list[Any]:
    """Events with consecutive deltas of one part joined and call ids left out."""
    out: list[Any] = []
    for event in events:
        if isinstance(event, ev.TextDelta | ev.ReasoningDelta | ev.PreambleDelta):
            key: Any = (type(event).__name__, event.text, tuple(getattr(event, "logprobs", None) or ()))
        elif isinstance(event, ev.ToolCallArgumentsDelta):
            key = ("args", event.delta, ())
        elif isinstance(event, ev.ToolCallStarted):
            key = ("call", event.index, event.name)
        elif isinstance(event, ev.ToolCallDone):
            key = ("done", event.index, event.name, event.arguments)
        else:
            key = event
        if isinstance(key, tuple) and len(key) == 3 and key[0] in (
                "TextDelta", "ReasoningDelta", "PreambleDelta", "args") and out and \
                isinstance(out[-1], tuple) and out[-1][0] == key[0]:
            out[-1] = (key[0], out[-1][1] + key[1], out[-1][2] + key[2])
        else:
            out.append(key)
    return out


def _harmony(ids: list[int], *, cut: int, finish: Finish | None, logprobs: bool,
             ) -> tuple[list[Chunk], list[TokenLogprob]]:
    lps = [TokenLogprob(f"t{i}", -0.5, token_id=t) for i, t in enumerate(ids)]
    chunks = [Chunk(token_ids=tuple(ids[i:i + cut]), logprobs=tuple(lps[i:i + cut]) if logprobs else None)
              for i in range(0, len(ids), cut)] or [Chunk()]
    chunks[-1] = replace(chunks[-1], finish=finish, usage=Usage(5, len(ids)) if finish else None)
    return chunks, lps


@SETTINGS
@given(st.sampled_from(SCRIPTS), st.integers(1, 40), st.integers(1, 9),
       st.one_of(st.none(), st.just(Finish("eos"))), st.booleans())
def test_harmony_slices_give_the_events_of_feed(script: str, cut: int, size: int, finish: Finish | None,
                                                logprobs: bool) -> None:
    ids = list(harmony_encoding().encode(script, allowed_special="all"))
    chunks, _ = _harmony(ids, cut=cut, finish=finish, logprobs=logprobs)
    whole, sliced = HarmonyEventParser(7), HarmonyEventParser(7)
    expected = [e for c in chunks for e in whole.feed(c)] + whole.close()
    got = [e for c in chunks for events in sliced.feed_slices(c, size) for e in events] + sliced.close()
    assert _normal(got) == _normal(expected)
    assert [type(e) for e in got] == [type(e) for e in expected]  # one event per token either way
    assert sliced.usage() == whole.usage()


def _text_parser(kind: str) -> TextEventParser:
    if kind == "openchatml":
        fmt: Any = OpenChatMLFormat()
    else:
        fmt = TemplateFormat((FIXTURES / "templates" / kind).read_text(), bos_token="<s>", eos_token="</s>")
    parser = fmt.parser(fmt.render(CONV, PARAMS), 7)
    assert isinstance(parser, TextEventParser)
    return parser


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["openchatml", "Qwen-QwQ-32B.jinja", "Qwen3-Coder.jinja"]), st.lists(TEXT, min_size=1,
       max_size=3), st.integers(1, 7), ENDS, st.booleans())
# found in CI: the recut pieces counted 8 reasoning tokens of 9, the chunk all 9 (as ``feed``)
@example(kind="Qwen-QwQ-32B.jinja", texts=["<think>\n<|start|>"], size=1, finish=Finish("eos"),
         logprobs=False)
def test_text_slices_give_the_answer_of_feed(kind: str, texts: list[str], size: int, finish: Finish | None,
                                             logprobs: bool) -> None:
    chunks = []
    for n, text in enumerate(texts):
        tokens = [text[i:i + 2] for i in range(0, len(text), 2)]  # their texts spell the chunk's
        lps = tuple(TokenLogprob(t, -0.1 * n, token_id=i) for i, t in enumerate(tokens))
        chunks.append(Chunk(text=text, token_ids=tuple(range(len(tokens))),
                            logprobs=lps if logprobs else None))
    chunks.append(Chunk(finish=finish, usage=Usage(3, 9) if finish else None))
    whole, sliced = _text_parser(kind), _text_parser(kind)
    if kind == "openchatml":
        expected = [e for c in chunks for e in whole.feed(c)] + whole.close()
    else:  # the template decoder's answer depends on the chunking (an unclosed <tool_call> then
        # junk: '<tool_call><|start|></think>' whole is text '<|start|></think>', in 3 chunks
        # '<|start|>'), so it is given the same cuts as chunks of their own
        expected = [e for c in chunks for piece in _recut(c, size) for e in whole.feed(piece)] + whole.close()
    got = [e for c in chunks for events in sliced.feed_slices(c, size) for e in events] + sliced.close()
    assert [_no_usage(k[:2] if isinstance(k, tuple) else k) for k in _normal(got)] == \
        [_no_usage(k[:2] if isinstance(k, tuple) else k) for k in _normal(expected)]
    # the token counts are the chunk's, as ``feed`` of the same chunks counts them (the recut
    # pieces above carry no token ids: each counts as one token, reasoning or not on its own)
    unsliced = _text_parser(kind)
    for c in chunks:
        unsliced.feed(c)
    unsliced.close()
    assert sliced.usage() == unsliced.usage()
    # which held token goes with which text is a heuristic that depends on the chunking (as
    # upstream chunking does); none is ever invented, repeated or out of order
    given_lps = [lp for c in chunks for lp in c.logprobs or ()]
    answer = [lp for e in got if isinstance(e, ev.TextDelta) for lp in e.logprobs or ()]
    it = iter(given_lps)
    assert all(any(lp is g for g in it) for lp in answer)


def _no_usage(event: Any) -> Any:
    return replace(event, usage=None) if isinstance(event, ev.Finished) else event


def _recut(chunk: Chunk, size: int) -> list[Chunk]:
    """``chunk`` as the chunks of its slices (what ``feed_slices`` decodes, one call each)."""
    if len(chunk.text) <= size:
        return [chunk]
    pieces = [Chunk(text=t, logprobs=lps) for t, lps in _slices(chunk.text, chunk.logprobs, size)]
    return [*pieces[:-1], replace(pieces[-1], finish=chunk.finish, usage=chunk.usage)]


def test_text_is_cut_on_token_boundaries_when_the_tokens_spell_it() -> None:
    lps = tuple(TokenLogprob(t, -1.0) for t in ["ab", "cde", "f", "gh"])
    assert [(t, [lp.token for lp in ps or ()]) for t, ps in _slices("abcdefgh", lps, 3)] == [
        ("abcde", ["ab", "cde"]), ("fgh", ["f", "gh"])]
    odd = tuple(TokenLogprob(t, -1.0) for t in ["x", "y"])  # they do not spell it: all on the first
    assert [(t, len(ps or ())) for t, ps in _slices("abcdefgh", odd, 3)] == [
        ("abc", 2), ("def", 0), ("gh", 0)]


async def test_the_event_stream_gives_the_loop_back_between_slices() -> None:
    """One chunk of 10,000 ids: before, every event of it came without a suspension."""
    ids = list(harmony_encoding().encode("<|channel|>final<|message|>", allowed_special="all"))
    hello = harmony_encoding().encode("Hello")[0]
    chunk = Chunk(token_ids=(*ids, *[hello] * 10_000))
    assert len(chunk.token_ids) > HUGE

    async def rest() -> AsyncIterator[Chunk]:
        yield Chunk(token_ids=tuple(harmony_encoding().encode("<|return|>", allowed_special="all")),
                    finish=Finish("eos"))

    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    prompt = HarmonyFormat().render(CONV, PARAMS)
    stream = EventStream(chunk, rest(), HarmonyFormat().parser(prompt, 7), PARAMS, frozenset())
    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    seen: list[int] = []
    text = []
    async for event in stream:
        seen.append(turns)
        if isinstance(event, ev.TextDelta):
            text.append(event.text)
    task.cancel()
    assert "".join(text) == "Hello" * 10_000
    assert isinstance(event, ev.Finished) and event.reason == "stop"
    # 10,000 ids in slices of SLICE_TOKENS: the other task ran between every two of them
    assert len(set(seen)) >= 10_000 // SLICE_TOKENS, sorted(set(seen))
