"""A coalesced ``EventStream`` (a non-streamed answer) reads a read of several chunks with the
parser's ``feed_joined``: the same events as feeding them one by one and joining the deltas,
stop strings, tool guard, the token budget's cut and usage included, on random reads."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.conversation import GenerationParams
from app.core.output import Chunk, Finish, TokenLogprob, Usage
from app.engine.stream import HUGE, EventStream
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CALL, CHANNEL, MESSAGE, RETURN, START, harmony_encoding
from tests.unit.engine.test_coalesce import Reads


def _ids(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special=set()))


class ChunkByChunk:
    """The parser without ``feed_joined``: the stream feeds it chunk by chunk."""

    def __init__(self, parser: HarmonyEventParser) -> None:
        self._parser = parser

    def __getattr__(self, name: str) -> Any:
        if name == "feed_joined":
            raise AttributeError(name)
        return getattr(self._parser, name)


class Counting(HarmonyEventParser):
    joined = 0

    def feed_joined(self, chunks: Any) -> list[ev.Event]:
        Counting.joined += 1
        return super().feed_joined(chunks)


def _same_ids(events: list[ev.Event]) -> list[ev.Event]:
    return [dataclasses.replace(e, call_id="call") if isinstance(e, ev.ToolCallStarted | ev.ToolCallDone)
            else e for e in events]


async def _events(parser: Any, reads: list[list[Chunk]], stops: tuple[str, ...],
                  tools: frozenset[str]) -> list[ev.Event]:
    source = Reads(reads)
    first = await source.__anext__()
    stream = EventStream(first, source, parser, GenerationParams(stop=stops), tools)
    stream.coalesce()
    return _same_ids([e async for e in stream])


_PIECES = st.sampled_from([
    [CHANNEL, *_ids("analysis"), MESSAGE, *_ids("Think it over, twice. "), 200007, START, *_ids("assistant")],
    [CHANNEL, *_ids("final"), MESSAGE, *_ids("Hello there, how are you today? "), RETURN],
    [CHANNEL, *_ids("commentary"), MESSAGE, *_ids("Let me look."), 200007, START, *_ids("assistant")],
    [CHANNEL, *_ids("commentary to=functions.get_weather"), 200003, *_ids("json"), MESSAGE,
     *_ids('{"city": "Paris"}'), CALL],
    [CHANNEL, *_ids("commentary to=functions.other"), MESSAGE, *_ids("{}"), CALL],
    [CHANNEL, *_ids("final"), MESSAGE, *_ids("A stop here and more text"), 200007],
    [START, *_ids("user"), MESSAGE, *_ids("fabricated"), 200007],
    _ids("stray text"),
])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_PIECES, min_size=1, max_size=4), sizes=st.lists(st.integers(1, 9), min_size=1),
       per_chunk=st.integers(1, 3), finish=st.sampled_from(["eos", "length"]), logprobs=st.booleans(),
       stops=st.sampled_from([(), ("are you",), ("stop here",), ("twice",)]))
@pytest.mark.asyncio
async def test_joined_reads_are_the_chunk_by_chunk_events(pieces: list[list[int]], sizes: list[int],
                                                          per_chunk: int, finish: str, logprobs: bool,
                                                          stops: tuple[str, ...]) -> None:
    ids = [i for piece in pieces for i in piece]
    cuts = [tuple(ids[i:i + per_chunk]) for i in range(0, len(ids), per_chunk)]
    chunks = [Chunk(token_ids=cut, logprobs=tuple(TokenLogprob("x", -0.5) for _ in cut) if logprobs else None)
              for cut in cuts]
    chunks.append(Chunk(finish=Finish(finish), usage=Usage(10, len(ids))))  # type: ignore[arg-type]
    reads, at, n = [], 0, 0
    while at < len(chunks):
        size = sizes[n % len(sizes)]
        reads.append(chunks[at:at + size])
        at, n = at + size, n + 1
    tools = frozenset({"get_weather"})
    expected = await _events(ChunkByChunk(HarmonyEventParser(10)), reads, stops, tools)
    got = await _events(HarmonyEventParser(10), reads, stops, tools)
    assert got == expected


@pytest.mark.asyncio
async def test_a_read_of_many_chunks_goes_through_feed_joined() -> None:
    ids = [CHANNEL, *_ids("final"), MESSAGE, *_ids("Hello there, how are you today?"), RETURN]
    chunks = [Chunk(token_ids=(i,)) for i in ids] + [Chunk(finish=Finish("eos"), usage=Usage(3, len(ids)))]
    Counting.joined = 0
    events = await _events(Counting(3), [chunks[:1], chunks[1:]], (), frozenset())
    assert Counting.joined == 1
    answer = [e for e in events if isinstance(e, ev.TextDelta)]
    assert answer == [ev.TextDelta("Hello there, how are you today?")]


@pytest.mark.asyncio
async def test_a_read_with_a_huge_chunk_is_fed_as_before() -> None:
    body = _ids("word ") * (HUGE + 10)
    ids = [CHANNEL, *_ids("final"), MESSAGE, *body, RETURN]
    chunks = [Chunk(token_ids=tuple(ids[:3])), Chunk(token_ids=tuple(ids[3:])),
              Chunk(finish=Finish("eos"), usage=Usage(3, len(ids)))]
    Counting.joined = 0
    got = await _events(Counting(3), [chunks[:1], chunks[1:]], (), frozenset())
    assert Counting.joined == 0
    expected = await _events(ChunkByChunk(HarmonyEventParser(3)), [chunks[:1], chunks[1:]], (), frozenset())
    assert got == expected
