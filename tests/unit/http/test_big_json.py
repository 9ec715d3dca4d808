"""A big body's item list parsed in pieces gives exactly what one ``orjson.loads`` gives, or
nothing (``None``: the caller parses it whole) whenever a cut might not be between items."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.http import big_json
from app.http.big_json import loads_in_pieces
from app.http.body import BodyRejected, parse_json

TRICKY = ["}, {", '}, {"role": "user"}', "], [", '"input": [{', "\\", '\\"', "{", "}", "\u00e9", "\U0001f600",
          "]", ",", " "]


def _body(n: int, text: str = "m", **more: Any) -> dict[str, Any]:
    return {"model": "m", "input": [{"role": "user", "content": f"{text}{i}"} for i in range(n)], **more}


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(big_json, "PIECE", 64)  # many cuts in a small body


@pytest.mark.parametrize("option", [0, orjson.OPT_INDENT_2])
def test_a_long_input_list_parses_to_the_same_value(option: int) -> None:
    body = _body(500, tools=[{"type": "function", "name": "f"}, {"type": "function", "name": "g"}],
                 metadata={"input": "x"})
    raw = orjson.dumps(body, option=option)
    value = loads_in_pieces(raw)
    assert value == body and list(value) == list(body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=3)), min_size=1, max_size=40),
       st.integers(0, 3))
def test_strings_that_look_like_cuts_never_change_the_value(texts: list[str], where: int) -> None:
    items: list[Any] = [{"role": "user", "content": t, "nested": [{"input": [{"a": t}]}, {}]} for t in texts]
    body: dict[str, Any] = {"input": items}
    if where == 1:
        body = {"x": {"input": [{"k": 1}, {"k": 2}]}, "input": items}
    if where == 2:
        body["messages"] = items[::-1]
    if where == 3:
        items.append({"content": "}, {" * 50})
    raw = orjson.dumps(body)
    value = loads_in_pieces(raw)
    assert value is None or value == orjson.loads(raw)


@pytest.mark.parametrize("broken", [b'{"input": [{"a": 1}, {"a": NaN}, {"a": 2}' + b', {"a": 3}' * 20 + b"]}",
                                    b'{"input": [{"a": "\\ud800"}' + b', {"a": 3}' * 20 + b"]}",
                                    b'{"input": [{"a": 1}' + b', {"a": 3}' * 20 + b"], }",
                                    b'{"input": [{"a": 1}' + b', {"a": 3}' * 20])
def test_an_invalid_body_is_left_to_the_whole_parse_and_its_error(broken: bytes) -> None:
    assert loads_in_pieces(broken) is None
    with pytest.raises(BodyRejected) as whole:
        parse_json(broken)
    with pytest.raises(BodyRejected) as pieced:
        parse_json(broken, pieces=True)
    assert (pieced.value.code, pieced.value.detail) == (whole.value.code, whole.value.detail)


def test_bodies_without_a_long_list_of_objects_are_not_pieced() -> None:
    assert loads_in_pieces(orjson.dumps({"input": "text " * 1000})) is None
    assert loads_in_pieces(orjson.dumps({"input": list(range(1000))})) is None
    assert loads_in_pieces(orjson.dumps([{"input": [{"a": 1}] * 100}])) is None  # not an object
    assert loads_in_pieces(orjson.dumps({"x": {"input": [{"a": 1}] * 100}})) is None  # not top level


def test_a_long_integer_still_goes_through_the_range_check() -> None:
    raw = orjson.dumps(_body(100))[:-1] + b', "seed": 99999999999999999999}'
    with pytest.raises(BodyRejected) as rejected:
        parse_json(raw, pieces=True)
    assert rejected.value.code == "integer_out_of_range"


def test_no_single_parse_call_takes_the_whole_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """100,000 items (3.5 MB): the longest ``orjson.loads`` call is a piece's, not the body's
    (one call holds the GIL: ~35 ms for the body, the event loop stopped with it)."""
    monkeypatch.setattr(big_json, "PIECE", 1 << 16)
    raw = orjson.dumps(_body(100_000))
    sizes: list[int] = []
    real = orjson.loads

    def loads(data: bytes) -> Any:
        sizes.append(len(data))
        return real(data)

    monkeypatch.setattr(orjson, "loads", loads)  # as big_json calls it
    t0 = time.perf_counter()
    value = loads_in_pieces(raw)
    assert value is not None and len(value["input"]) == 100_000 and value["input"][-1]["content"] == "m99999"
    assert len(raw) > 3_400_000 and max(sizes) < 70_000, max(sizes)
    assert time.perf_counter() - t0 < 5
