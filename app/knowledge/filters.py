"""OpenAI's attribute filters (``filters`` of ``POST /v1/vector_stores/{id}/search`` and of the
``file_search`` tool): validated, evaluated in Python, and translated to SQL.

The grammar, as the OpenAI SDK types define it (``ComparisonFilter`` / ``CompoundFilter``)::

    comparison := {"type": "eq"|"ne"|"gt"|"gte"|"lt"|"lte"|"in"|"nin", "key": str, "value": v}
    compound   := {"type": "and"|"or", "filters": [comparison | compound, ...]}

Contract:

* :func:`parse` validates an untrusted object and returns a normalised copy (numbers as
  ``float``, ``in`` / ``nin`` values as lists); anything malformed is a 400
  :class:`~app.core.errors.InvalidRequest` whose ``param`` names the path of the offending
  part, e.g. ``filters.filters[1].type``.  Bounded: nesting depth :data:`MAX_DEPTH`, at most
  :data:`MAX_NODES` filters and :data:`MAX_VALUES` compared values in all, keys of at most 64
  characters, strings of at most 512 (OpenAI's own bounds on attributes).
* :func:`matches` evaluates a parsed filter on one set of attributes; :func:`sqlite_where` and
  :func:`postgres_where` translate it to a SQL boolean expression over a JSON column with bound
  parameters only (no user text is ever spliced into SQL).  The three agree on every input
  (``tests/unit/knowledge/test_filters.py`` checks it with Hypothesis on both databases).

Semantics (OpenAI does not spell them out; these are the gateway's):

* ``eq`` / ``in`` match an attribute of the same kind only: a string equals a string, a
  number a number (``1`` equals ``1.0``), a boolean a boolean (``true`` is not ``1``).
* ``ne`` / ``nin`` are exactly ``not eq`` / ``not in``: a file without the key, or whose value
  is of another kind, matches them.
* ``gt`` / ``gte`` / ``lt`` / ``lte`` compare numbers with numbers, and strings with strings
  by code point (byte order of UTF-8); a missing key or another kind never matches.  A boolean
  value is refused for them (400).
* ``and`` of no filters is true, ``or`` of none is false.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from app.core.errors import InvalidRequest

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 8
MAX_NODES = 256
MAX_VALUES = 1024
MAX_KEY = 64
MAX_STRING = 512

Filter = Mapping[str, Any]


def _bad(path: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid '{path}': {message}", param=path, code="invalid_value")


def _text(path: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise _bad(path, f"at most {limit} characters.")
    if "\x00" in value or any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise _bad(path, "NUL characters and lone surrogates are not allowed.")
    return value


def _scalar(path: str, value: Any, *, allow_bool: bool) -> str | float | bool:
    if isinstance(value, bool):
        if not allow_bool:
            raise _bad(path, "a string or a number is expected.")
        return value
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise _bad(path, "numbers must be finite.")
        return number
    if isinstance(value, str):
        return _text(path, value, MAX_STRING)
    raise _bad(path, "a string, a number or a boolean is expected.")


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0
        self.values = 0

    def take(self, path: str, nodes: int, values: int) -> None:
        self.nodes += nodes
        self.values += values
        if self.nodes > MAX_NODES:
            raise _bad(path, f"a filter may hold at most {MAX_NODES} filters in all.")
        if self.values > MAX_VALUES:
            raise _bad(path, f"a filter may compare at most {MAX_VALUES} values in all.")


def _parse(obj: Any, path: str, depth: int, budget: _Budget) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise _bad(path, "a comparison or compound filter object is expected.")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in COMPARISONS + COMPOUNDS:
        raise _bad(f"{path}.type", f"one of {', '.join(COMPARISONS + COMPOUNDS)} is expected.")
    if kind in COMPOUNDS:
        extra = set(obj) - {"type", "filters"}
        if extra:
            raise _bad(f"{path}.{sorted(extra)[0]}", "unknown field of a compound filter.")
        if depth >= MAX_DEPTH:
            raise _bad(path, f"filters nest at most {MAX_DEPTH} levels deep.")
        children = obj.get("filters")
        if not isinstance(children, list):
            raise _bad(f"{path}.filters", "an array of filters is expected.")
        budget.take(path, 1, 0)
        return {"type": kind, "filters": [_parse(child, f"{path}.filters[{i}]", depth + 1, budget)
                                          for i, child in enumerate(children)]}
    extra = set(obj) - {"type", "key", "value"}
    if extra:
        raise _bad(f"{path}.{sorted(extra)[0]}", "unknown field of a comparison filter.")
    key = obj.get("key")
    if not isinstance(key, str) or not key:
        raise _bad(f"{path}.key", "a non-empty string is expected.")
    _text(f"{path}.key", key, MAX_KEY)
    if "value" not in obj:
        raise _bad(f"{path}.value", "a value is required.")
    value = obj["value"]
    if kind in ("in", "nin"):
        if not isinstance(value, list):
            raise _bad(f"{path}.value", f"'{kind}' compares with an array of strings or numbers.")
        budget.take(path, 1, len(value))
        items = [_scalar(f"{path}.value[{i}]", item, allow_bool=False) for i, item in enumerate(value)]
        return {"type": kind, "key": key, "value": items}
    budget.take(path, 1, 1)
    return {"type": kind, "key": key,
            "value": _scalar(f"{path}.value", value, allow_bool=kind in ("eq", "ne"))}


def parse(obj: Any, param: str = "filters") -> dict[str, Any]:
    """A validated, normalised copy of the filter ``obj`` (400 naming ``param``'s path)."""
    return _parse(obj, param, 0, _Budget())


# --- evaluation in Python ----------------------------------------------------------------------

def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(have: Any, want: Any) -> bool:
    if isinstance(want, bool):
        return isinstance(have, bool) and have == want
    if isinstance(want, str):
        return isinstance(have, str) and have == want
    return _is_number(have) and float(have) == float(want)


def _ordered(op: str, have: Any, want: Any) -> bool:
    if isinstance(want, str):
        if not isinstance(have, str):
            return False
    elif not _is_number(have):
        return False
    else:
        have, want = float(have), float(want)
    if op == "gt":
        return bool(have > want)
    if op == "gte":
        return bool(have >= want)
    if op == "lt":
        return bool(have < want)
    return bool(have <= want)


def matches(flt: Filter | None, attributes: Mapping[str, Any]) -> bool:
    """Whether ``attributes`` pass the parsed filter ``flt`` (``None``: everything passes)."""
    if flt is None:
        return True
    kind = flt["type"]
    if kind == "and":
        return all(matches(child, attributes) for child in flt["filters"])
    if kind == "or":
        return any(matches(child, attributes) for child in flt["filters"])
    present = flt["key"] in attributes
    have = attributes.get(flt["key"])
    want = flt["value"]
    if kind in ("eq", "ne"):
        found = present and _equal(have, want)
        return found if kind == "eq" else not found
    if kind in ("in", "nin"):
        found = present and any(_equal(have, w) for w in want)
        return found if kind == "in" else not found
    return bool(present and _ordered(kind, have, want))


# --- translation to SQL ------------------------------------------------------------------------

_SQL_OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class _SqlFilter(ABC):
    """A filter as one SQL expression; each dialect says how one key is tested (``_test``) and
    spells true and false."""

    TRUE, FALSE = "1", "0"

    @abstractmethod
    def _test(self, key: str, want: Any, op: str = "=") -> str:
        """One key compared with one value (``op``), as an SQL boolean expression."""

    def where(self, flt: Filter) -> str:
        kind = flt["type"]
        if kind in COMPOUNDS:
            parts = [self.where(child) for child in flt["filters"]]
            if not parts:
                return self.TRUE if kind == "and" else self.FALSE
            return "(" + f" {kind.upper()} ".join(parts) + ")"
        key, want = flt["key"], flt["value"]
        if kind in ("eq", "ne"):
            test = self._test(key, want)
        elif kind in ("in", "nin"):
            test = "(" + " OR ".join(self._test(key, w) for w in want) + ")" if want else self.FALSE
        else:
            return self._test(key, want, _SQL_OPS[kind])
        return f"(NOT {test})" if kind in ("ne", "nin") else test


class _Sqlite(_SqlFilter):
    """SQLite's JSON1: ``json_type`` / ``json_extract`` with a bound path; a key the path
    syntax cannot spell (``"`` or ``\\``) is looked up with ``json_each`` instead."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.params: list[Any] = []

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return "?"

    def _test(self, key: str, want: Any, op: str = "=") -> str:
        """The SQL truth of one positive comparison (eq / ordered) of ``key`` with ``want``
        (placeholders bound in the order they appear)."""
        each = '"' in key or "\\" in key or any(ord(ch) < 0x20 for ch in key)
        if each:
            start = f"EXISTS (SELECT 1 FROM json_each({self.column}) AS j WHERE j.key = {self.bind(key)} AND "
            t = "j.type"
        else:
            path = f'$."{key}"'
            t = f"json_type({self.column}, {self.bind(path)})"
        if isinstance(want, bool):
            expr = f"{t} = {self.bind('true' if want else 'false')}"
        else:
            v = "j.value" if each else f"json_extract({self.column}, {self.bind(path)})"
            if isinstance(want, str):
                expr = f"({t} = 'text' AND {v} {op} {self.bind(want)})"
            else:
                expr = f"({t} IN ('integer', 'real') AND CAST({v} AS REAL) {op} {self.bind(float(want))})"
        return f"{start}{expr})" if each else f"COALESCE({expr}, 0)"



def sqlite_where(flt: Filter, column: str = "attributes") -> tuple[str, list[Any]]:
    """``(expression, parameters)``: the filter over the JSON text ``column`` for SQLite
    (``?`` placeholders, in order)."""
    sql = _Sqlite(column)
    return sql.where(flt), sql.params


class _Postgres(_SqlFilter):
    """PostgreSQL's jsonb: ``jsonb_typeof(col -> key)`` and ``col ->> key`` with the key bound;
    strings compare under ``COLLATE "C"`` (code point order, as Python does)."""

    TRUE, FALSE = "TRUE", "FALSE"

    def __init__(self, column: str, first: int) -> None:
        self.column, self.first = column, first
        self.params: list[Any] = []

    def bind(self, value: Any, cast: str) -> str:
        self.params.append(value)
        return f"${self.first + len(self.params) - 1}::{cast}"

    def _test(self, key: str, want: Any, op: str = "=") -> str:
        k = self.bind(key, "text")
        field, kind = f"({self.column} -> {k})", f"jsonb_typeof({self.column} -> {k})"
        if isinstance(want, bool):
            return f"COALESCE({field} = {self.bind('true' if want else 'false', 'jsonb')}, FALSE)"
        if isinstance(want, str):
            return (f"COALESCE({kind} = 'string' AND ({self.column} ->> {k}) COLLATE \"C\" {op} "
                    f"{self.bind(want, 'text')} COLLATE \"C\", FALSE)")
        return (f"COALESCE({kind} = 'number' AND CASE WHEN {kind} = 'number' THEN "
                f"({self.column} ->> {k})::float8 END {op} {self.bind(float(want), 'float8')}, FALSE)")



def postgres_where(flt: Filter, column: str = "attributes", first_param: int = 1,
                   ) -> tuple[str, list[Any]]:
    """``(expression, parameters)``: the filter over the jsonb ``column`` for PostgreSQL,
    numbering its placeholders from ``$first_param``."""
    sql = _Postgres(column, first_param)
    return sql.where(flt), sql.params
