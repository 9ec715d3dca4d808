"""A tool's JSON schema is checked in bounded time: more than ``MAX_SCHEMA_NODES`` subschemas
is a 400 found before the walk goes far (issue 35's neighbours: 100,000 properties in a
13 MB body ran the check ~2.4 s on the event loop, once per conversion of the tools)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidRequest
from app.items.validate import MAX_SCHEMA_NODES, _check_schema, _valid, check_json_schema


def _flat(n: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}}


def _nested(n: int) -> dict[str, Any]:
    """``n`` subschemas spread over 100 objects of ``n // 100 - 1`` properties each."""
    per = n // 100 - 1
    return {"type": "object", "properties": {
        f"o{j}": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(per)}}
        for j in range(100)}}


@pytest.mark.parametrize("make", [_flat, _nested])
def test_the_bound_counts_every_subschema(make: Any) -> None:
    check_json_schema(make(MAX_SCHEMA_NODES - 1), "tools[0].parameters")  # the root is one
    with pytest.raises(InvalidRequest) as info:
        check_json_schema(make(MAX_SCHEMA_NODES + 100), "tools[0].parameters")
    assert info.value.status == 400 and info.value.code == "invalid_json_schema"
    assert info.value.param == "tools[0].parameters"
    assert f"{MAX_SCHEMA_NODES:,} subschemas" in str(info.value)


def test_lists_and_maps_of_subschemas_count_alike() -> None:
    wide_any = {"anyOf": [{"type": "string"}] * (MAX_SCHEMA_NODES + 1)}
    items = {"type": "array", "items": [{"type": "string"}] * (MAX_SCHEMA_NODES + 1)}
    for schema in (wide_any, items):
        with pytest.raises(InvalidRequest):
            check_json_schema(schema, "response_format.json_schema.schema")


def test_a_hostile_schema_is_refused_without_walking_it() -> None:
    """100,000 properties: refused before a path is built for each (was ~2.4 s)."""
    hostile = _flat(100_000)
    started = time.process_time()
    for _ in range(10):
        with pytest.raises(InvalidRequest):
            check_json_schema(hostile, "tools[0].parameters")
    # 10 checks of the whole schema took ~10 s before; one refusal now costs microseconds
    assert time.process_time() - started < 1.0


_KEYS = st.sampled_from(["type", "properties", "items", "anyOf", "required", "enum", "$defs",
                         "additionalProperties", "not", "prefixItems", "description", "x"])
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3),
                    st.sampled_from(["object", "string", "array", "nope"]))
_SCHEMAS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(_KEYS, st.text(max_size=2)), inner, max_size=5)),
    max_leaves=40)


@given(_SCHEMAS)
@settings(max_examples=400, deadline=None)
def test_the_fast_walk_and_the_naming_walk_agree(schema: Any) -> None:
    """The path-free walk accepts exactly what the walk that names the fault accepts (and a
    ``type`` that is an object is a 400, not a TypeError: it was a 500)."""
    try:
        _check_schema(schema, "p", 0, [MAX_SCHEMA_NODES, "p"])
        named_ok = True
    except InvalidRequest:
        named_ok = False
    assert _valid(schema) is named_ok
    if named_ok:
        check_json_schema(schema, "p")
    else:
        with pytest.raises(InvalidRequest):
            check_json_schema(schema, "p")


@pytest.mark.parametrize("bad", [{"type": {}}, {"type": [{}]}, {"type": [["string"]]},
                                 {"properties": {"a": {"type": {"x": 1}}}}])
def test_an_unhashable_type_is_a_400(bad: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_json_schema(bad, "tools[0].parameters")
    assert info.value.code == "invalid_json_schema"
