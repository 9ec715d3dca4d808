"""Deltas that arrive together (one upstream read) are joined for an answer that is only folded
(a non-streaming run), never for a streamed one: the same answer, fewer events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.api.chat.encode import ChatEncoder
from app.core import events as ev
from app.core.access import ANONYMOUS
from app.core.conversation import GenerationParams
from app.core.output import Chunk, Finish, TokenLogprob, Usage
from app.engine.run import Mode, Run
from app.engine.stream import EventStream
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CALL, CHANNEL, MESSAGE, RETURN, START, harmony_encoding

pytestmark = pytest.mark.asyncio


def _ids(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special=set()))


def _answer() -> list[int]:
    """Reasoning, then a final answer of several tokens."""
    return [CHANNEL, *_ids("analysis"), MESSAGE, *_ids("Think it over, twice."), 200007,
            START, *_ids("assistant"), CHANNEL, *_ids("final"), MESSAGE,
            *_ids("Hello there, how are you today?"), RETURN]


class Reads:
    """A backend's chunks as they arrived (``split``: the rest of the first read, then each
    read), one token a chunk."""

    def __init__(self, reads: list[list[Chunk]]) -> None:
        self._reads = [list(r) for r in reads]

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._one()

    async def _one(self) -> AsyncIterator[Chunk]:
        while self._reads:
            for chunk in self._reads.pop(0):
                yield chunk

    async def __anext__(self) -> Chunk:
        while not self._reads[0]:
            self._reads.pop(0)
        return self._reads[0].pop(0)

    def split(self) -> tuple[list[Chunk], AsyncIterator[list[Chunk]]]:
        return (self._reads.pop(0) if self._reads else []), self._rest()

    async def _rest(self) -> AsyncIterator[list[Chunk]]:
        while self._reads:
            yield self._reads.pop(0)


def _reads(ids: list[int], size: int, logprobs: bool = False) -> list[list[Chunk]]:
    chunks = [Chunk(token_ids=(i,), logprobs=(TokenLogprob("x", -0.5),) if logprobs else None) for i in ids]
    chunks.append(Chunk(finish=Finish("eos"), usage=Usage(10, len(ids))))
    return [chunks[i:i + size] for i in range(0, len(chunks), size)]


async def _events(reads: list[list[Chunk]], coalesce: bool, stops: tuple[str, ...] = (),
                  tools: frozenset[str] = frozenset()) -> list[ev.Event]:
    source = Reads(reads)
    first = await source.__anext__()
    stream = EventStream(first, source, HarmonyEventParser(10), GenerationParams(stop=stops), tools)
    if coalesce:
        stream.coalesce()
    return [e async for e in stream]


def _text(events: list[ev.Event], kind: type[ev.TextDelta | ev.ReasoningDelta]) -> str:
    return "".join(e.text for e in events if isinstance(e, ev.TextDelta | ev.ReasoningDelta)
                   and isinstance(e, kind))


@pytest.mark.parametrize("size", [1, 3, 7, 100])
async def test_coalesced_events_say_the_same_in_fewer_deltas(size: int) -> None:
    ids = _answer()
    per_token = await _events(_reads(ids, size), coalesce=False)
    joined = await _events(_reads(ids, size), coalesce=True)
    for kind in (ev.TextDelta, ev.ReasoningDelta):
        assert _text(joined, kind) == _text(per_token, kind)
    assert [type(e) for e in joined if not isinstance(e, ev.TextDelta | ev.ReasoningDelta)] == \
        [type(e) for e in per_token if not isinstance(e, ev.TextDelta | ev.ReasoningDelta)]
    assert joined[-1] == per_token[-1]  # the same Finished, usage included
    deltas = [e for e in joined if isinstance(e, ev.TextDelta | ev.ReasoningDelta)]
    assert len(deltas) <= len(_reads(ids, size)) + 2  # at most one per part and read
    if size > 1:
        assert len(deltas) < len([e for e in per_token if isinstance(e, ev.TextDelta | ev.ReasoningDelta)])


async def test_without_coalesce_every_token_is_its_own_delta() -> None:
    ids = _answer()
    events = await _events(_reads(ids, 100), coalesce=False)
    answer = [e for e in events if isinstance(e, ev.TextDelta)]
    assert len(answer) == len(_ids("Hello there, how are you today?"))


async def test_stop_strings_cut_the_joined_text_where_they_cut_per_token() -> None:
    ids = _answer()
    for size in (1, 4, 100):
        joined = await _events(_reads(ids, size), coalesce=True, stops=("are you",))
        per_token = await _events(_reads(ids, size), coalesce=False, stops=("are you",))
        assert _text(joined, ev.TextDelta) == _text(per_token, ev.TextDelta) == "Hello there, how "
        assert isinstance(joined[-1], ev.Finished) and joined[-1].stop_sequence == "are you"


async def test_deltas_with_logprobs_are_not_joined() -> None:
    ids = _answer()
    joined = await _events(_reads(ids, 100, logprobs=True), coalesce=True)
    answer = [e for e in joined if isinstance(e, ev.TextDelta)]
    assert len(answer) == len(_ids("Hello there, how are you today?"))
    assert all(e.logprobs for e in answer)


async def test_tool_call_arguments_are_joined_per_call() -> None:
    ids = [CHANNEL, *_ids("commentary to=functions.get_weather"), 200003, *_ids("json"), MESSAGE,
           *_ids('{"city": "Paris", "unit": "c"}'), CALL]
    joined = await _events(_reads(ids, 100), coalesce=True, tools=frozenset({"get_weather"}))
    per_token = await _events(_reads(ids, 100), coalesce=False, tools=frozenset({"get_weather"}))
    assert len([e for e in per_token if isinstance(e, ev.ToolCallArgumentsDelta)]) > 1
    args = [e for e in joined if isinstance(e, ev.ToolCallArgumentsDelta)]
    assert len(args) == 1 and args[0].delta == '{"city": "Paris", "unit": "c"}'
    done = [(e.name, e.arguments) for e in joined if isinstance(e, ev.ToolCallDone)]
    assert done == [(e.name, e.arguments) for e in per_token if isinstance(e, ev.ToolCallDone)]


class Coalescable:
    """An event stream that records whether it was asked to coalesce."""

    def __init__(self) -> None:
        self.asked = False
        self._events: list[ev.Event] = [ev.TextDelta("hi"), ev.Finished("stop", Usage(1, 1))]

    def coalesce(self) -> None:
        self.asked = True

    def __aiter__(self) -> Coalescable:
        return self

    async def __anext__(self) -> ev.Event:
        if not self._events:
            raise StopAsyncIteration
        return self._events.pop(0)


@pytest.mark.parametrize(("mode", "asked"), [("wait", True), ("stream", False), ("background", False)])
async def test_only_a_run_that_is_waited_for_coalesces(mode: Mode, asked: bool) -> None:
    source = Coalescable()
    enc = ChatEncoder("chatcmpl-1", "m", 0, include_usage=False, logprobs=False, stream=mode != "wait")
    run = Run("chatcmpl-1", "m", ANONYMOUS, enc, mode, None, {})
    run.begin(source)
    assert run.task is not None
    await run.task
    assert source.asked is asked


async def _one_at_a_time(chunks: list[Chunk]) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


@pytest.mark.parametrize("finish", ["eos", "length"])
@pytest.mark.parametrize("size", [1, 2, 5])
async def test_reads_give_the_events_a_chunk_at_a_time_gives(size: int, finish: str) -> None:
    """Reads of one event (the paced path: no list, no hold when nothing is held) and of a few
    give exactly the events of the chunk-at-a-time stream, a part the budget cut included."""
    ids = [CHANNEL, *_ids("analysis"), MESSAGE, *_ids("Think it over."), 200007]  # the part ends
    if finish == "eos":
        ids += [START, *_ids("assistant"), CHANNEL, *_ids("final"), MESSAGE, *_ids("Hi there."), RETURN]
    chunks = [Chunk(token_ids=(i,)) for i in ids]
    chunks.append(Chunk(finish=Finish(finish), usage=Usage(10, len(ids))))  # type: ignore[arg-type]
    plain = _one_at_a_time(chunks)
    first = await plain.__anext__()
    expected = [e async for e in EventStream(first, plain, HarmonyEventParser(10), GenerationParams(),
                                             frozenset())]
    got = await _events([chunks[i:i + size] for i in range(0, len(chunks), size)], coalesce=False)
    assert got == expected
    assert isinstance(got[-1], ev.Finished) and got[-1].reason == ("length" if finish == "length" else "stop")
    parts = [e for e in got if isinstance(e, ev.PartDone)]
    assert len(parts) == (0 if finish == "length" else 2)  # the cut reasoning part is not "done"
