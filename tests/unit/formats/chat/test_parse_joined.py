"""``DeltaParser.feed_joined`` (a read of a non-streamed chat-mode answer): the events of
``feed`` chunk by chunk with the adjacent deltas of one part joined, on random chunks (text,
reasoning, both, tool-call fragments, logprobs, usage, finishes anywhere) cut into any reads."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.output import Chunk, Finish, TokenLogprob, ToolCallChunk, Usage
from app.formats.chat.parse import DeltaParser
from tests.unit.formats.harmony.test_parse_joined import _join

_TEXT = st.sampled_from(["", "", "Hi", " there", "é", "\n"])
_CALL = st.builds(ToolCallChunk, st.integers(0, 2), st.sampled_from([None, "call_1"]),
                  st.sampled_from([None, "f", "g"]), st.sampled_from(["", '{"a"', ": 1}"]))
_CHUNK = st.builds(
    Chunk, text=_TEXT, token_ids=st.sampled_from([(), (1,), (2, 3)]),
    logprobs=st.sampled_from([None, None, None, (), (TokenLogprob("x", -0.1),)]),
    finish=st.sampled_from([None] * 12 + [Finish("eos"), Finish("length"), Finish("eos", refused=True)]),
    usage=st.sampled_from([None] * 8 + [Usage(3, 4), Usage(3, 4, 2)]),
    reasoning=_TEXT, tool_calls=st.lists(_CALL, max_size=2).map(tuple))


def _same_ids(events: list[ev.Event]) -> list[ev.Event]:
    return [dataclasses.replace(e, call_id="call") if isinstance(e, ev.ToolCallStarted | ev.ToolCallDone)
            else e for e in events]


def _outcome(reads: list[list[Chunk]], joined: bool) -> list[object]:
    parser = DeltaParser(5)
    out: list[object] = []
    for read in reads:
        events = parser.feed_joined(read) if joined else [e for c in read for e in parser.feed(c)]
        out.append((_same_ids(_join(events)), parser.usage()))
    out.append(_same_ids(parser.close()))
    return out


@settings(max_examples=600, deadline=None)
@given(chunks=st.lists(_CHUNK, max_size=24), sizes=st.lists(st.integers(1, 8), min_size=1, max_size=5))
def test_joined_reads_give_the_events_of_chunk_by_chunk(chunks: list[Chunk], sizes: list[int]) -> None:
    reads, at, n = [], 0, 0
    while at < len(chunks):
        size = sizes[n % len(sizes)]
        reads.append(chunks[at:at + size])
        at, n = at + size, n + 1
    assert _outcome(reads, joined=True) == _outcome(reads, joined=False)


def test_a_read_of_text_chunks_is_one_delta() -> None:
    chunks = [Chunk(reasoning="Hm"), Chunk(reasoning=", yes"),
              *(Chunk(text=t) for t in ("Hi", " there", "!")), Chunk(finish=Finish("eos"), usage=Usage(3, 5))]
    parser = DeltaParser(3)
    events = parser.feed_joined(chunks)
    assert events[:4] == [ev.ReasoningDelta("Hm, yes"), ev.PartDone("reasoning"), ev.TextDelta("Hi there!"),
                          ev.PartDone("text")]
    assert parser.usage().reasoning_tokens == 2
