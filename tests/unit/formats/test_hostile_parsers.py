"""Hostile model output through every parser, as the pipeline runs it: whatever a backend
streams (random token ids with control tokens, random text with markers, broken chat
deltas, in any chunking), the event stream ends with exactly one terminal event and raises
nothing. Property tests (hypothesis) over the real formats."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.conversation import Conversation, FunctionTool, GenerationParams, Message, TextPart
from app.core.errors import InvalidRequest
from app.core.output import Chunk, Finish, ToolCallChunk
from app.engine.stream import EventStream
from app.formats.catalog import ChatFormat, HarmonyFormat, OpenChatMLFormat, TemplateFormat
from app.formats.harmony.vocab import harmony_encoding
from app.formats.parsing.base import EventParser
from tests.support.paths import FIXTURES

TEMPLATES = FIXTURES / "templates"
SPECIALS = list(range(199998, 200019))
CONV = Conversation((Message("user", (TextPart("hi"),)),), tools=(
    FunctionTool("get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}}}),))
PARAMS = GenerationParams()
FINISHES = st.one_of(st.none(), st.sampled_from([Finish("eos"), Finish("length"),
                                                 Finish("stop_string", "x")]))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MARKER_TEXT = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>",
               "<|constrain|>", "assistant", "user", "final", "analysis", "commentary", " to=functions.",
               "get_weather", "json", "{", "}", '"', "<think>", "</think>", "<tool_call>", "</tool_call>",
               "<|im_start|>", "<|im_end|>", "<|literal|>", "<|endliteral|>", "\n", " ", "x"]


async def _drain(parser: EventParser, chunks: list[Chunk]) -> list[ev.Event]:
    async def source() -> AsyncIterator[Chunk]:
        for chunk in chunks[1:]:
            yield chunk
    stream = EventStream(chunks[0] if chunks else None, source(), parser, PARAMS,
                         frozenset({"get_weather"}))
    events = [e async for e in stream]
    await stream.aclose()
    return events


def _check(events: list[ev.Event], *, parser_may_fail: bool = False) -> None:
    terminals = [e for e in events if isinstance(e, ev.TERMINAL)]
    assert len(terminals) == 1 and events[-1] is terminals[0], events[-3:]
    if not parser_may_fail:  # our own decoders report bad output with their own codes
        last = events[-1]
        assert not (isinstance(last, ev.Error) and last.code == "invalid_model_output"), last


@SETTINGS
@given(st.lists(st.lists(st.one_of(st.sampled_from(SPECIALS), st.integers(0, 199997)), max_size=8),
                max_size=12), FINISHES)
def test_harmony_token_ids(pieces: list[list[int]], finish: Finish | None) -> None:
    enc = harmony_encoding()
    prompt = HarmonyFormat().render(CONV, PARAMS)
    chunks = [Chunk(text="", token_ids=tuple(p)) for p in pieces]
    chunks.append(Chunk(finish=finish))
    events = asyncio.run(_drain(HarmonyFormat().parser(prompt, 10), chunks))
    _check(events, parser_may_fail=True)  # openai-harmony raises on malformed headers
    assert enc is not None


def _text_chunks(pieces: list[str], finish: Finish | None) -> list[Chunk]:
    return [*[Chunk(text=p) for p in pieces], Chunk(finish=finish)]


PIECE = st.lists(st.one_of(st.sampled_from(MARKER_TEXT), st.text(max_size=4)), max_size=6).map("".join)
TEXT = st.lists(PIECE, max_size=10)
TEMPLATE_NAMES = ["Qwen3-Coder.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                  "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "google-gemma-2-2b-it.jinja",
                  "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Kimi-K2-Thinking.jinja"]
CALL_DELTA = st.builds(ToolCallChunk, st.integers(-2, 3), st.one_of(st.none(), st.text(max_size=4)),
                       st.one_of(st.none(), st.sampled_from(["get_weather", "other", ""])),
                       st.text(max_size=5))


@SETTINGS
@given(TEXT, FINISHES)
def test_openchatml_text(pieces: list[str], finish: Finish | None) -> None:
    fmt = OpenChatMLFormat()
    events = asyncio.run(_drain(fmt.parser(fmt.render(CONV, PARAMS), 10), _text_chunks(pieces, finish)))
    _check(events)


@SETTINGS
@given(st.sampled_from(TEMPLATE_NAMES), TEXT, FINISHES)
def test_template_text(template: str, pieces: list[str], finish: Finish | None) -> None:
    fmt = TemplateFormat((TEMPLATES / template).read_text(), bos_token="<s>", eos_token="</s>")
    try:
        prompt = fmt.render(CONV, PARAMS)
    except InvalidRequest:  # a template without tool syntax refuses tools
        prompt = fmt.render(Conversation(CONV.messages), PARAMS)
    events = asyncio.run(_drain(fmt.parser(prompt, 10), _text_chunks(pieces, finish)))
    _check(events)


@SETTINGS
@given(st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5), st.lists(CALL_DELTA, max_size=2)),
                max_size=8), FINISHES)
def test_chat_deltas(pieces: list[tuple[str, str, list[ToolCallChunk]]], finish: Finish | None) -> None:
    chunks = [Chunk(text=t, reasoning=r, tool_calls=tuple(calls)) for t, r, calls in pieces]
    chunks.append(Chunk(finish=finish))
    fmt = ChatFormat()
    events = asyncio.run(_drain(fmt.parser(fmt.render(CONV, PARAMS), 10), chunks))
    _check(events)
