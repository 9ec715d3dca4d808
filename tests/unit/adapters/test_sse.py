"""The incremental SSE decoder gives the same events for every way of chunking."""

from __future__ import annotations

import random

from adapters.sse import SSEDecoder
from tests.support.wire import load

STREAM = (b'data: {"a":1}\n\n: keep-alive comment\n\nevent: x\ndata: {"b":\n'
          b'data: 2}\r\n\r\ndata: last\r\rdata: unterminated')
EXPECTED = ['{"a":1}', '{"b":\n2}', "last", "unterminated"]


def _decode_in_pieces(data: bytes, cuts: list[int]) -> list[str]:
    decoder = SSEDecoder()
    out: list[str] = []
    prev = 0
    for cut in [*sorted(cuts), len(data)]:
        out += decoder.decode(data[prev:cut])
        prev = cut
    return out + decoder.flush()


def test_whole_stream() -> None:
    assert _decode_in_pieces(STREAM, []) == EXPECTED


def test_every_split_point_and_random_splits() -> None:
    for i in range(len(STREAM) + 1):
        assert _decode_in_pieces(STREAM, [i]) == EXPECTED, i
    rng = random.Random(7)
    for _ in range(300):
        cuts = rng.sample(range(len(STREAM)), rng.randint(1, 12))
        assert _decode_in_pieces(STREAM, cuts) == EXPECTED


def test_recorded_llamacpp_stream_bytewise() -> None:
    record = load("03a_completion_tokenids_stream")
    body = "".join(c["text"] for c in record["response"]["chunks"]).encode()
    expected = [e["data"] for e in record["derived"]["sse_events"]]
    decoder = SSEDecoder()
    got = [ev for i in range(len(body)) for ev in decoder.decode(body[i:i + 1])]
    assert got + decoder.flush() == expected
