"""A big body's long strings decoded in pieces give exactly what one ``orjson.loads`` gives,
or nothing (``None``: the caller parses the body whole) whenever a stretch might not be one
string, and no single decode call takes the whole string (a 14 MB message held the GIL
20-31 ms in one ``orjson.loads``)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.http import big_json
from app.http.big_json import loads_long_strings
from app.http.body import BodyRejected, parse_json

# no '"': a stretch with quotes (escaped ones too) is not a long stretch, and goes whole
CHARS = st.sampled_from(["a", " ", "\\", "\n", "\t", "\u00e9", "\u2028", "\U0001f600", "\x00", "/", "}", "{"])


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(big_json, "PIECE", 64)  # a "long" string is over 64 bytes here
    monkeypatch.setattr(big_json, "STRING_PIECE", 48)  # and decoded 48 bytes at a time


def _dump(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value).encode() if ascii_only else orjson.dumps(value)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.text(CHARS, min_size=0, max_size=400), min_size=1, max_size=5),
       ascii_only=st.booleans())
def test_long_strings_decode_to_the_same_value(texts: list[str], ascii_only: bool) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": t} for t in texts],
            "instructions": texts[0], "tools": [{"description": texts[-1]}]}
    raw = _dump(body, ascii_only)
    got = loads_long_strings(raw)
    if got is not None:
        assert got == orjson.loads(raw)
    if any(len(_dump(t, ascii_only)) > 200 for t in texts):  # a quote-free window certainly
        assert got is not None


def test_a_14_mb_message_is_never_decoded_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(big_json, "PIECE", 1 << 16)
    monkeypatch.setattr(big_json, "STRING_PIECE", 1 << 20)
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "w " * 7_340_032}]})
    sizes: list[int] = []
    real = orjson.loads

    def counting(data: Any) -> Any:
        sizes.append(len(data))
        return real(data)

    monkeypatch.setattr("orjson.loads", counting)  # every call, the whole-body parse's too
    value = parse_json(raw, pieces=True)
    monkeypatch.setattr("orjson.loads", real)
    assert value == orjson.loads(raw)
    assert len(sizes) >= 14 and max(sizes) <= (1 << 20) + big_json.SEEK + 2


@pytest.mark.parametrize(("raw", "taken"), [
    (b'{"x":[' + b",".join(b"1" for _ in range(200)) + b'],"y":"z"}', False),  # a stretch of structure
    (b'{"x":"abc\\"' + b"a" * 300 + b'"}', False),  # the quote before the stretch is escaped
    (b'{"' + b"k" * 300 + b'":1}', False),  # a long key: the placeholder is no value
    (b'{"x":[' + b",".join(b"1" for _ in range(200)) + b'],"y":"' + b"b" * 300 + b'"}', True),  # then one
    (b'{"x":"' + b"a" * 300 + b'","y":"' + b"b" * 300 + b'"}' + b" " * 500, True),  # two strings, a tail
])
def test_what_is_not_certainly_a_string_value_is_left_whole(raw: bytes, taken: bool) -> None:
    got = loads_long_strings(raw)
    assert got == (orjson.loads(raw) if taken else None)


@pytest.mark.parametrize(("raw", "code"), [
    (b'{"x":"' + b"a" * 300 + b'\x01"}', "invalid_json"),  # a raw control character
    (b'{"x":"' + b"a" * 300 + b'\xff"}', "invalid_unicode"),
    (b'{"x":"' + b"a" * 300 + b'\\ud800"}', "invalid_unicode"),  # a lone surrogate
    (b'{"x":"' + b"a" * 300 + b'"', "invalid_json"),  # the body ends early
])
def test_an_invalid_long_string_gets_the_whole_parse_and_its_error(raw: bytes, code: str) -> None:
    assert loads_long_strings(raw) is None
    with pytest.raises(BodyRejected) as caught:
        parse_json(raw, pieces=True)
    assert caught.value.code == code


def test_escapes_everywhere_give_up_quickly_and_parse_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(big_json, "SEEK", 16)  # no cut without a backslash within 12 bytes before
    raw = b'{"x":"' + b"\\n" * 400 + b'"}'
    assert loads_long_strings(raw) is None
    assert parse_json(raw, pieces=True) == {"x": "\n" * 400}
