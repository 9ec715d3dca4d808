"""The upstream stream a read at a time (adapters.transport.post_batches, ChunkBatches): the
events of one read of the body arrive together, in order, and every failure stays where the
one-event-at-a-time stream had it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from adapters.llamacpp import LlamaCppBackend
from adapters.transport import ChunkBatches, post_batches, post_stream
from app.core.conversation import GenerationParams
from app.core.errors import UpstreamError
from app.core.output import Chunk
from app.core.prompt import Prompt


class Reads(httpx.AsyncByteStream):
    """A body that arrives in the given pieces (one ``aiter_raw`` item each)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


def _event(i: int, last: bool = False) -> bytes:
    body = {"content": f"t{i}", "tokens": [i], "stop": last}
    if last:
        body |= {"stop_type": "eos", "tokens_evaluated": 3, "tokens_predicted": 5}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _client(pieces: list[bytes]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Reads(pieces))

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_one_list_per_read_with_its_events_in_order() -> None:
    # the second read ends inside an event: that one comes with the third read
    pieces = [_event(0) + _event(1) + _event(2), _event(3) + _event(4)[:9],
              _event(4)[9:] + b"data: [DONE]\n\n"]
    async with _client(pieces) as client:
        batches = [b async for b in post_batches(client, "http://up/completion", {}, "llama.cpp")]
    assert [[e["content"] for e in b] for b in batches] == [["t0", "t1", "t2"], ["t3"], ["t4"]]


async def test_a_read_without_a_whole_event_yields_nothing() -> None:
    whole = _event(0)
    pieces = [whole[:5], whole[5:12], whole[12:], b": comment\n\n", _event(1)]
    async with _client(pieces) as client:
        batches = [b async for b in post_batches(client, "http://up/completion", {}, "llama.cpp")]
    assert [[e["content"] for e in b] for b in batches] == [["t0"], ["t1"]]


async def test_the_last_event_comes_with_what_the_drained_body_still_had() -> None:
    pieces = [_event(0) + _event(1, last=True), b"data: [DONE]\n\n"]
    async with _client(pieces) as client:
        batches = [b async for b in post_batches(client, "http://up/completion", {}, "llama.cpp",
                                                 is_last=lambda e: e.get("stop") is True)]
    assert [[e["content"] for e in b] for b in batches] == [["t0", "t1"]]


async def test_a_malformed_event_raises_after_the_events_before_it() -> None:
    pieces = [_event(0) + _event(1) + b"data: {not json\n\n" + _event(2)]
    seen: list[str] = []
    async with _client(pieces) as client:
        with pytest.raises(UpstreamError, match="malformed stream event"):
            async for batch in post_batches(client, "http://up/completion", {}, "llama.cpp"):
                seen += [e["content"] for e in batch]
        one_by_one: list[str] = []
        with pytest.raises(UpstreamError, match="malformed stream event"):
            async for event in post_stream(client, "http://up/completion", {}, "llama.cpp"):
                one_by_one.append(event["content"])
    assert seen == one_by_one == ["t0", "t1"]


async def _read(pieces: list[Chunk] | list[list[Chunk]]) -> AsyncIterator[list[Chunk]]:
    for piece in pieces:
        assert isinstance(piece, list)
        yield piece


async def test_chunk_batches_one_stream_two_views() -> None:
    a, b, c, d = (Chunk(text=x) for x in "abcd")
    chunks = ChunkBatches(_read([[a, b, c], [], [d]]))
    assert await chunks.__anext__() == a
    assert await chunks.batch() == [b, c]  # the rest of the first read
    assert await chunks.batch() == [d]  # an empty read is skipped
    with pytest.raises(StopAsyncIteration):
        await chunks.batch()
    every = ChunkBatches(_read([[a, b], [c], [d]]))
    assert [x async for x in every] == [a, b, c, d]


async def test_backend_stream_gives_each_read_as_one_batch() -> None:
    pieces = [_event(0) + _event(1), _event(2) + _event(3, last=True)]
    async with _client(pieces) as client:
        backend = LlamaCppBackend(client, ["http://up"])
        stream = backend.stream_via(backend.dialect, Prompt(token_ids=(1, 2, 3)), GenerationParams())
        try:
            first = await stream.__anext__()
            batches = [await stream.batch(), await stream.batch()]
            with pytest.raises(StopAsyncIteration):
                await stream.batch()
        finally:
            await stream.aclose()
    assert first.token_ids == (0,)
    assert [[x.token_ids for x in batch] for batch in batches] == [[(1,)], [(2,), (3,)]]
    assert batches[1][1].finish is not None and batches[1][1].usage is not None


async def test_split_gives_the_rest_of_the_read_then_the_source_itself() -> None:
    a, b, c, d = (Chunk(text=x) for x in "abcd")
    source = _read([[a, b, c], [d]])
    chunks = ChunkBatches(source)
    assert await chunks.__anext__() == a
    left, reads = chunks.split()
    assert left == [b, c] and reads is source  # no layer of ChunkBatches per read
    assert [r async for r in reads] == [[d]]
    await chunks.aclose()


async def test_backend_stream_of_one_event_per_read() -> None:
    """A paced upstream (one event a read): each read is one chunk, and an error event raises
    where it came, the chunks before it already given."""
    pieces = [_event(0), _event(1), _event(2), _event(3, last=True)]
    async with _client(pieces) as client:
        backend = LlamaCppBackend(client, ["http://up"])
        stream = backend.stream_via(backend.dialect, Prompt(token_ids=(1, 2, 3)), GenerationParams())
        first = await stream.__anext__()
        left, reads = stream.split()
        got = [[x.token_ids for x in read] async for read in reads]
        await stream.aclose()
    assert first.token_ids == (0,) and left == [] and got == [[(1,)], [(2,)], [(3,)]]
    bad = b"data: " + orjson.dumps({"error": {"message": "slot lost"}}) + b"\n\n"
    async with _client([_event(0), _event(1), bad, _event(2)]) as client:
        backend = LlamaCppBackend(client, ["http://up"])
        stream = backend.stream_via(backend.dialect, Prompt(token_ids=(1, 2, 3)), GenerationParams())
        seen = [(await stream.__anext__()).token_ids]
        _, reads = stream.split()
        with pytest.raises(UpstreamError, match="slot lost"):
            async for read in reads:
                seen += [x.token_ids for x in read]
        await stream.aclose()
    assert seen == [(0,), (1,)]
