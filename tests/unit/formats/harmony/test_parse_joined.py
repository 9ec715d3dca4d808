"""``HarmonyEventParser.feed_joined`` (the read of a non-streamed answer): the events of
``feed`` for each chunk in turn with the adjacent deltas of one part joined, on random
well-formed and malformed token streams cut into any chunks and reads, with and without
logprobs, usage and finishes anywhere; and one delta a part where ``feed`` made one a token."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.output import Chunk, Finish, TokenLogprob, Usage
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CHANNEL, MESSAGE, RETURN, START, harmony_encoding
from tests.unit.formats.harmony.test_parse_equivalence import _encode, _messages, _same_ids

_FINISHES = ("eos", "length", "stop_string")


def _ids(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special=set()))


def _join(events: list[ev.Event]) -> list[ev.Event]:
    """Adjacent deltas of one part as one (what ``EventStream`` does for a folded answer)."""
    out: list[ev.Event] = []
    for e in events:
        last = out[-1] if out else None
        if type(e) is type(last):
            if isinstance(e, ev.TextDelta) and isinstance(last, ev.TextDelta) \
                    and not e.logprobs and not last.logprobs:
                out[-1] = ev.TextDelta(last.text + e.text)
                continue
            if isinstance(e, ev.ReasoningDelta) and isinstance(last, ev.ReasoningDelta):
                out[-1] = ev.ReasoningDelta(last.text + e.text)
                continue
            if isinstance(e, ev.PreambleDelta) and isinstance(last, ev.PreambleDelta):
                out[-1] = ev.PreambleDelta(last.text + e.text)
                continue
            if isinstance(e, ev.ToolCallArgumentsDelta) and isinstance(last, ev.ToolCallArgumentsDelta) \
                    and e.index == last.index:
                out[-1] = ev.ToolCallArgumentsDelta(e.index, last.delta + e.delta)
                continue
        out.append(e)
    return out


def _chunks(ids: list[int], cuts: list[int], marks: list[int], finish: str | None,
            usage_apart: bool) -> list[Chunk]:
    """``ids`` cut at ``cuts``; chunk ``i`` has logprobs when ``marks[i] % 5 == 1``, usage when
    ``% 7 == 2`` and a finish of its own when ``% 11 == 3`` (a finish mid-answer, as a broken
    backend might); then the backend's finish (and usage, in a chunk of its own if asked)."""
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    out = []
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        piece = tuple(ids[a:b])
        mark = marks[n % len(marks)] if marks else 0
        out.append(Chunk(token_ids=piece,
                         logprobs=tuple(TokenLogprob(str(t), -0.5) for t in piece) if mark % 5 == 1 else None,
                         usage=Usage(3, len(piece)) if mark % 7 == 2 else None,
                         finish=Finish("eos") if mark % 11 == 3 else None))
    if finish is not None:
        out.append(Chunk(finish=Finish(finish), usage=None if usage_apart else Usage(7, len(ids))))  # type: ignore[arg-type]
        if usage_apart:
            out.append(Chunk(usage=Usage(7, len(ids))))
    return out


def _outcome(parser: HarmonyEventParser, reads: list[list[Chunk]], joined: bool) -> list[object]:
    """Per read: its events (adjacent deltas joined) and the usage so far, or the error; then
    what ``close`` gives."""
    out: list[object] = []
    for read in reads:
        try:
            events = parser.feed_joined(read) if joined else [e for c in read for e in parser.feed(c)]
        except Exception as exc:  # a malformed stream: the same error at the same read
            out.append((type(exc).__name__, str(exc)))
            return out
        out.append((_same_ids(_join(events)), parser.usage()))
    out.append(_same_ids(parser.close()))
    return out


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=_messages(), cuts=st.lists(st.integers(0, 400), max_size=12),
       marks=st.lists(st.integers(0, 76), max_size=6),
       sizes=st.lists(st.integers(1, 6), min_size=1, max_size=6),
       finish=st.sampled_from([*_FINISHES, None]), usage_apart=st.booleans(),
       prefill=st.sampled_from([(), tuple(_encode("<|channel|>commentary to=functions.f")),
                                tuple(_encode("<|channel|>commentary to=browser.search"))]))
def test_joined_reads_give_the_events_of_chunk_by_chunk(
        ids: list[int], cuts: list[int], marks: list[int], sizes: list[int], finish: str | None,
        usage_apart: bool, prefill: tuple[int, ...]) -> None:
    chunks = _chunks(ids, cuts, marks, finish, usage_apart)
    reads, at = [], 0
    for size in itertools.cycle(sizes):
        if at >= len(chunks):
            break
        reads.append(chunks[at:at + size])
        at += size
    try:
        HarmonyEventParser(7, prefill)
    except Exception:
        return  # a forced header the parser refuses: nothing to compare
    one_by_one = _outcome(HarmonyEventParser(7, prefill), reads, joined=False)
    joined = _outcome(HarmonyEventParser(7, prefill), reads, joined=True)
    assert joined == one_by_one


@settings(max_examples=300, deadline=None)
@given(body=st.lists(st.integers(0, 199_997), max_size=40), cuts=st.lists(st.integers(0, 60), max_size=8))
def test_any_body_bytes_decode_the_same_joined(body: list[int], cuts: list[int]) -> None:
    """Bodies decoded together (invalid UTF-8, characters cut between tokens and chunks) are
    the text decoded token by token."""
    ids = _encode("<|channel|>final<|message|>") + body + [RETURN]
    chunks = _chunks(ids, cuts, [], "eos", False)
    parser = HarmonyEventParser(7)
    text = "".join(e.text for e in parser.feed_joined(chunks) if isinstance(e, ev.TextDelta))
    raw = b"".join(harmony_encoding().decode([t], errors="surrogateescape").encode("utf-8", "surrogateescape")
                   for t in body)
    assert text == raw.decode("utf-8", errors="replace")


def test_one_delta_a_part_for_a_read_of_one_token_chunks() -> None:
    reasoning, answer = "Think it over, twice.", "Hello there, how are you today?"
    ids = [CHANNEL, *_ids("analysis"), MESSAGE, *_ids(reasoning), 200007, START, *_ids("assistant"),
           CHANNEL, *_ids("final"), MESSAGE, *_ids(answer), RETURN]
    chunks = [Chunk(token_ids=(i,)) for i in ids] + [Chunk(finish=Finish("eos"), usage=Usage(5, len(ids)))]
    events = HarmonyEventParser(5).feed_joined(chunks)
    assert events[:-1] == [ev.ReasoningDelta(reasoning), ev.PartDone("reasoning"), ev.TextDelta(answer),
                           ev.PartDone("text")]
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "stop"
    assert events[-1].usage.reasoning_tokens == len(_ids(reasoning))


def test_text_with_logprobs_stays_a_delta_a_token() -> None:
    ids = [*_encode("<|channel|>final<|message|>"), *_ids("Hi there you"), RETURN]
    chunks = [Chunk(token_ids=(i,), logprobs=(TokenLogprob("x", -0.1),)) for i in ids]
    deltas = [e for e in HarmonyEventParser(5).feed_joined(chunks) if isinstance(e, ev.TextDelta)]
    assert len(deltas) == len(_ids("Hi there you")) and all(d.logprobs for d in deltas)
