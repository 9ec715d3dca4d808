"""The NDJSON decoder gives the same lines for every way of chunking the bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.ndjson import NDJSONDecoder

BODY = (b'{"a":1}\n\n{"b":"\xc3\xa9"}\r\n   \n{"c":\n'  # a blank line, CRLF, a line split
        b'3}\n{"d":"\xff"}\n{"last":true}')
LINES = ['{"a":1}', '{"b":"é"}\r', '{"c":', '3}', '{"d":"\ufffd"}', '{"last":true}']


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(BODY)), max_size=12))
def test_any_chunking_gives_the_same_lines(cuts: list[int]) -> None:
    decoder, out, prev = NDJSONDecoder(), [], 0
    for cut in [*sorted(cuts), len(BODY)]:
        out += decoder.decode(BODY[prev:cut])
        prev = cut
    assert out + decoder.flush() == LINES


def test_one_huge_line_in_small_reads_is_decoded_in_linear_time() -> None:
    import time
    body = b'{"a": "' + b"x" * (16 << 20) + b'"}\n{"b": 1}\n'
    decoder = NDJSONDecoder()
    started = time.process_time()
    lines = [line for i in range(0, len(body), 4096) for line in decoder.decode(body[i:i + 4096])]
    assert time.process_time() - started < 5.0
    assert [len(line) for line in lines] == [(16 << 20) + 9, 8] and decoder.flush() == []


def test_a_line_split_anywhere_is_the_same_line() -> None:
    body = b'{"a": 1}\n\n{"b": "two"}\n{"c"'
    for cut in range(len(body) + 1):
        decoder = NDJSONDecoder()
        out = decoder.decode(body[:cut]) + decoder.decode(body[cut:]) + decoder.flush()
        assert out == ['{"a": 1}', '{"b": "two"}', '{"c"'], cut
