"""Request bodies (app/http/body.py): a large body is parsed off the event loop, the same way."""

from __future__ import annotations

import pytest

from app.http.body import BIG_BODY, SCAN, BodyRejected, _has_long_number, parse_json
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize("at", [0, SCAN - 19, SCAN - 10, SCAN - 1, SCAN, 2 * SCAN + 5])
def test_a_long_number_is_found_across_the_slices(at: int) -> None:
    raw = bytearray(b" " * (3 * SCAN))
    raw[at:at + 19] = b"1" * 19
    assert _has_long_number(bytes(raw))
    raw[at + 18:at + 19] = b" "
    assert not _has_long_number(bytes(raw))


def test_an_integer_beyond_64_bits_is_refused_in_a_large_body() -> None:
    with pytest.raises(BodyRejected):
        parse_json(b'{"pad": "' + b"x" * (2 * BIG_BODY) + b'", "n": 99999999999999999999}')
    assert parse_json(b'{"pad": "' + b"9" * (2 * BIG_BODY) + b'"}')["pad"][:3] == "999"


async def test_a_large_body_gets_the_same_answers() -> None:
    pad = "x" * (2 * BIG_BODY)
    async with gateway(FakeLlamaCpp("<|channel|>final<|message|>Hi.<|return|>").transport()) as c:
        body = f'{{"model": "{MODEL}", "metadata": {{"pad": "{pad}"}}, "seed": 99999999999999999999}}'
        r = await c.post("/v1/chat/completions", content=body.encode(), headers=JSON)
        assert r.status_code == 400 and r.json()["error"]["code"] == "integer_out_of_range", r.text
        r = await c.post("/v1/chat/completions", headers=JSON,
                         content=b'{"model": "x", "pad": "' + b"\xff" * BIG_BODY + b'"}')
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_unicode", r.text
