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
