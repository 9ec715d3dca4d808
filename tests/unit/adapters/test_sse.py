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


# --- the run of one-line ``data: `` events taken whole: same events as line by line ---------

class _LineByLine(SSEDecoder):
    """The decoder without its fast path: every line through ``_line`` (the reference)."""

    def decode(self, chunk: bytes) -> list[str]:
        buf = self._buffer + chunk
        events: list[str] = []
        pos = 0
        size = len(buf)
        while True:
            ends = [i for i in (buf.find(b"\r", pos), buf.find(b"\n", pos)) if i >= 0]
            if not ends:
                break
            end = min(ends)
            if buf[end:end + 1] == b"\r":
                if end + 1 == size:
                    break  # may be the first half of \r\n
                step = 2 if buf[end + 1:end + 2] == b"\n" else 1
            else:
                step = 1
            event = self._line(buf[pos:end])
            pos = end + step
            if event is not None:
                events.append(event)
        self._buffer = buf[pos:]
        return events


_PIECES = [b"data: ", b"data:", b"data: {\"a\": 1}", b"x", b"\xc3\xa9", b"\xff", b"\n", b"\n\n",
           b"\r\n", b": ping", b"event: e", b"id: 3", b" ", b"data: [DONE]"]


def _run(decoder: SSEDecoder, data: bytes, cuts: list[int]) -> list[str]:
    out: list[str] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        out += decoder.decode(data[prev:cut])
        prev = cut
    return out + decoder.flush()


def test_fast_path_matches_line_by_line_on_random_streams() -> None:
    rng = random.Random(40)
    for _ in range(3000):
        data = b"".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 25)))
        cuts = [rng.randint(0, len(data)) for _ in range(rng.randint(0, 4))]
        assert _run(SSEDecoder(), data, cuts) == _run(_LineByLine(), data, cuts), (data, cuts)


def test_fast_path_events() -> None:
    body = b'data: {"a":1}\n\ndata:  two spaces\n\ndata: \xff\n\ndata: x\ndata: y\n\ndata: tail'
    assert _run(SSEDecoder(), body, []) == ['{"a":1}', " two spaces", "\ufffd", "x\ny", "tail"]
    # an event cut anywhere, even inside "data: " or between its two newlines
    for i in range(len(body) + 1):
        assert _run(SSEDecoder(), body, [i]) == _run(_LineByLine(), body, [i]), i


def test_one_huge_event_in_small_reads_is_decoded_in_linear_time() -> None:
    """16 MB in 4 KB reads: the reads that end no line are joined once (appending each to the
    buffer copied it ~4,000 times: ~32 GB, minutes); the margin below is ~100x."""
    import time
    body = b"data: " + b"x" * (16 << 20) + b"\n\n"
    decoder = SSEDecoder()
    started = time.process_time()
    events = [e for i in range(0, len(body), 4096) for e in decoder.decode(body[i:i + 4096])]
    assert time.process_time() - started < 5.0
    assert len(events) == 1 and len(events[0]) == 16 << 20


def test_a_lone_carriage_return_before_a_read_without_a_line_end_still_ends_the_line() -> None:
    decoder = SSEDecoder()
    assert decoder.decode(b"data: x\r") == []
    assert decoder.decode(b"\r") == []  # may be the first half of \r\n
    assert decoder.decode(b"data: y") == ["x"]  # it was not: a blank line, the event ends now
    assert decoder.decode(b"\n\n") == ["y"]
