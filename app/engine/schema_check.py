"""Checking a model's JSON output against a JSON schema (``strict`` tools' arguments, and
the answer of a ``strict`` json_schema response format).

Deliberately small and conservative: it checks what a function-calling schema says about
the shape of the arguments (``type``, ``properties``, ``required``,
``additionalProperties: false``, ``enum``, ``const``, ``items``) and accepts whatever it
does not understand (``$ref``, ``anyOf``, formats, ...), so a valid call is never refused.
It returns the first problem as a sentence, or None.
"""

from __future__ import annotations

from typing import Any

import orjson

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


def arguments_problem(arguments: str, schema: dict[str, Any] | None) -> str | None:
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return f"the arguments are not JSON: {arguments[:80]!r}"
    if not isinstance(value, dict):
        return "the arguments are not a JSON object"
    return _problem(value, schema or {"type": "object"}, "arguments")


def answer_problem(text: str, schema: dict[str, Any]) -> str | None:
    """What is wrong with ``text`` as the JSON answer ``schema`` describes, or None."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:  # where, never what: the text is the model's output
        return f"the answer is not JSON ({exc})"
    return _problem(value, schema, "the answer")


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _problem(value: Any, schema: Any, at: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if kinds and not any(_is(value, k) for k in kinds):
        return f"{at} should be {' or '.join(kinds)}, not {type(value).__name__}"
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        return f"{at} is not one of {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        return f"{at} should be {schema['const']!r}"
    if isinstance(value, dict):
        raw = schema.get("properties")
        props: dict[str, Any] = raw if isinstance(raw, dict) else {}
        for name in schema.get("required") or ():
            if name not in value:
                return f"{at} is missing the required property {name!r}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                return f"{at} has unexpected properties {extra!r}"
        for name, sub in props.items():
            if name in value:
                problem = _problem(value[name], sub, f"{at}.{name}")
                if problem:
                    return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = _problem(item, schema["items"], f"{at}[{i}]")
            if problem:
                return problem
    return None
