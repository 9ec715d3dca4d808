"""Checks shared by every ingest path (names that end up in message headers, ...)."""

from __future__ import annotations

import re
from typing import Any

from app.core.conversation import ReasoningEffort, TemplateValue
from app.core.errors import InvalidRequest

# OpenAI's rule for function names; it also guarantees that a name can never carry
# whitespace, '<|', or anything else that could alter a Harmony / OpenChatML header.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CALL_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


_EFFORT: dict[str, ReasoningEffort] = {"none": "low", "minimal": "low", "low": "low",
                                      "medium": "medium", "high": "high", "xhigh": "high"}


def reasoning_effort(value: str | None) -> ReasoningEffort | None:
    """OpenAI's effort levels on the three a model here has (both APIs accept the same six)."""
    return _EFFORT[value] if value is not None else None


def thinking(value: str | None) -> bool | None:
    """A template's on/off thinking switch from ``reasoning_effort`` (None: the template's default)."""
    return None if value is None else value != "none"


# What a chat template renders from: the gateway's own inputs, and Jinja's / HF's helpers.
_TEMPLATE_RESERVED = frozenset({
    "messages", "tools", "functions", "documents", "add_generation_prompt", "bos_token",
    "eos_token", "pad_token", "unk_token", "datetime", "date_string", "raise_exception",
    "strftime_now", "tojson", "namespace", "range", "dict", "lipsum", "cycler", "joiner", "loop",
    "self", "true", "false", "none", "True", "False", "None", "continue_final_message",
})
_TEMPLATE_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_MAX_TEMPLATE_KWARGS = 16


def template_kwargs(value: dict[str, Any] | None,
                    param: str = "chat_template_kwargs") -> tuple[tuple[str, TemplateValue], ...]:
    """Client variables for a Jinja chat template (``enable_thinking``, ``thinking``, ...).

    Only booleans, numbers and null: a string would be printed by the template as trusted
    prompt text, where it could spell a control token.  Names may not replace what the gateway
    gives the template (``messages``, ``bos_token``, ...)."""
    if not value:
        return ()
    if len(value) > _MAX_TEMPLATE_KWARGS:
        raise InvalidRequest(f"At most {_MAX_TEMPLATE_KWARGS} chat template variables.", param=param)
    out: list[tuple[str, TemplateValue]] = []
    for name, item in value.items():
        where = f"{param}.{name}"
        if not _TEMPLATE_VAR_RE.fullmatch(name) or name in _TEMPLATE_RESERVED:
            raise InvalidRequest(f"{name!r} cannot be set as a chat template variable.", param=where)
        if item is not None and not isinstance(item, bool | int | float):
            raise InvalidRequest("Chat template variables may only be booleans, numbers or null "
                                 "(text would become trusted prompt text).", param=where)
        out.append((name, item))
    return tuple(out)


_MAX_LOGIT_BIAS = 1024


def stop_strings(value: str | list[str] | None) -> tuple[str, ...]:
    """``stop``: one string or up to 4, none empty."""
    stop = () if value is None else (value,) if isinstance(value, str) else tuple(value)
    if len(stop) > 4 or any(not s for s in stop):
        raise InvalidRequest("stop takes up to 4 non-empty strings.", param="stop")
    return stop


def logit_bias(value: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``logit_bias``: token ids (as JSON object keys) to a bias in [-100, 100]."""
    if not value:
        return ()
    if len(value) > _MAX_LOGIT_BIAS:
        raise InvalidRequest(f"logit_bias may name at most {_MAX_LOGIT_BIAS} tokens.",
                             param="logit_bias")
    out: list[tuple[int, float]] = []
    for key, bias in value.items():
        if not key.isdigit() or len(key) > 9:
            raise InvalidRequest(f"logit_bias keys are token ids; {key[:40]!r} is not one.",
                                 param=f"logit_bias.{key[:40]}")
        if not -100.0 <= bias <= 100.0:
            raise InvalidRequest("A logit_bias value must be between -100 and 100.",
                                 param=f"logit_bias.{key}")
        out.append((int(key), float(bias)))
    return tuple(out)


def check_function_name(name: str, param: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"Invalid function name {name!r}: must match ^[A-Za-z0-9_-]{{1,64}}$.",
            param=param,
            code="invalid_function_name",
        )
    return name


def check_call_id(call_id: str, param: str) -> str:
    if not _CALL_ID_RE.fullmatch(call_id):
        raise InvalidRequest(
            f"Invalid tool call id {call_id!r}: use 1-128 letters, digits, '_', '-', '.', ':'.",
            param=param,
            code="invalid_tool_call_id",
        )
    return call_id


_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
               "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_ROLES = {"type": "type", "required": "required", "enum": "enum",
          **dict.fromkeys(_SUBSCHEMA_MAPS, "map"), **dict.fromkeys(_SUBSCHEMA_LISTS, "list"),
          **dict.fromkeys(_SUBSCHEMAS, "one")}
MAX_SCHEMA_DEPTH = 32  # subschema nesting; real tool schemas stay far below it
# subschemas in one schema: Claude Code's and Codex's largest tool has under 100, OpenAI's
# structured outputs allow 5,000 properties; checking one costs ~4 µs, so the walk of a
# hostile schema (100,000 properties in 13 MB) stops after ~40 ms instead of running ~2 s
MAX_SCHEMA_NODES = 10_000


def check_json_schema(schema: object, param: str) -> None:
    """A tool's ``parameters`` / a response format's ``schema`` must be a JSON Schema whose
    structural keywords have the right shapes (``type`` a JSON type or a list of them,
    ``properties`` an object of schemas, ``required`` a list of strings, ...), whose nesting
    stays within :data:`MAX_SCHEMA_DEPTH` and which has at most :data:`MAX_SCHEMA_NODES`
    subschemas: it is rendered into prompts and grammars, where a malformed one would be a
    silent garbage prompt or a crash. Unknown keywords are left alone.

    A valid schema is walked once without building a path (:func:`_valid`); only an invalid
    one is walked again to name where (:func:`_check_schema`)."""
    if not _valid(schema):
        _check_schema(schema, param, 0, [MAX_SCHEMA_NODES, param])


def _valid(schema: object) -> bool:
    """Whether :func:`_check_schema` accepts ``schema`` (the same rules, without paths, and
    looking only at the keys a node has: ~3x cheaper a node, which every tool of every
    request pays)."""
    stack: list[tuple[object, int]] = [(schema, 0)]
    left = MAX_SCHEMA_NODES
    while stack:
        node, depth = stack.pop()
        left -= 1
        if left < 0:
            return False
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict) or depth > MAX_SCHEMA_DEPTH:
            return False
        below = depth + 1
        for key, value in node.items():
            role = _ROLES.get(key) if isinstance(key, str) else None
            if role is None or (value is None and role != "one"):  # null: as if absent
                continue
            if role == "type":
                if isinstance(value, list):
                    if not value or not all(isinstance(k, str) and k in _JSON_TYPES for k in value):
                        return False
                elif not isinstance(value, str) or value not in _JSON_TYPES:
                    return False
            elif role == "required":
                if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
                    return False
            elif role == "enum":
                if not isinstance(value, list):
                    return False
            elif role == "map":
                if not isinstance(value, dict) or len(value) > left:
                    return False
                stack.extend((child, below) for child in value.values())
            elif role == "list" or (key == "items" and isinstance(value, list)):
                if not isinstance(value, list) or len(value) > left:
                    return False
                stack.extend((child, below) for child in value)
            else:
                stack.append((value, below))
    return True


def _bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid JSON schema at {param!r}: {message}", param=param,
                          code="invalid_json_schema")


def _check_schema(schema: object, at: str, depth: int, left: list[Any]) -> None:
    """``left``: [subschemas still allowed, the whole schema's parameter name], shared by
    the whole walk."""
    left[0] -= 1
    if left[0] < 0:
        raise _bad(left[1], f"more than {MAX_SCHEMA_NODES:,} subschemas.")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise _bad(at, "a schema must be an object (or true / false).")
    if depth > MAX_SCHEMA_DEPTH:
        raise _bad(at, f"nested more than {MAX_SCHEMA_DEPTH} levels deep.")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if (not kinds and kind is not None) or any(not isinstance(k, str) or k not in _JSON_TYPES
                                               for k in kinds):
        raise _bad(f"{at}.type", f"{kind!r} is not a JSON type (or a list of them).")
    required = schema.get("required")
    if required is not None and (not isinstance(required, list)
                                 or not all(isinstance(r, str) for r in required)):
        raise _bad(f"{at}.required", "must be a list of property names.")
    enum = schema.get("enum")
    if enum is not None and not isinstance(enum, list):
        raise _bad(f"{at}.enum", "must be a list.")
    for key, children in _children(schema, at, left):
        for where, child in children:
            _check_schema(child, f"{at}.{key}{where}", depth + 1, left)
    for key in _SUBSCHEMAS:
        if key in schema:
            child = schema[key]
            if key == "items" and isinstance(child, list):  # draft-04 tuple form
                for i, item in enumerate(child):
                    _check_schema(item, f"{at}.items[{i}]", depth + 1, left)
            else:
                _check_schema(child, f"{at}.{key}", depth + 1, left)


def _children(schema: dict[str, Any], at: str,
              left: list[Any]) -> list[tuple[str, list[tuple[str, object]]]]:
    """The subschemas under keywords that hold an object or a list of them, with their paths
    (more than ``left`` allows: refused before a path is built)."""
    out: list[tuple[str, list[tuple[str, object]]]] = []
    for key in (*_SUBSCHEMA_MAPS, *_SUBSCHEMA_LISTS):
        value = schema.get(key)
        if value is None:
            continue
        if isinstance(value, dict | list) and len(value) > left[0]:
            raise _bad(left[1], f"more than {MAX_SCHEMA_NODES:,} subschemas.")
        if key in _SUBSCHEMA_MAPS:
            if not isinstance(value, dict):
                raise _bad(f"{at}.{key}", "must be an object of schemas.")
            out.append((key, [(f".{name}", child) for name, child in value.items()]))
        else:
            if not isinstance(value, list):
                raise _bad(f"{at}.{key}", "must be a list of schemas.")
            out.append((key, [(f"[{i}]", child) for i, child in enumerate(value)]))
    return out
