"""Tool-call bookkeeping for :mod:`app.formats.template.parse`: indices, ids, typed arguments.

Calls are announced (:class:`~app.core.events.ToolCallStarted`) as soon as their name is
known and completed with one arguments delta holding the whole JSON object (through the
shared :class:`~app.formats.parsing.parts.Parts`, which keeps indexes and ids).  Tagged argument values
arrive as text: a parameter whose schema type is ``string`` stays a string, anything
else is decoded as JSON (Python literals accepted) when it parses.
"""

from __future__ import annotations

import json
from typing import Any

from app.core import events as ev
from app.formats.parsing.parts import Parts
from app.formats.template.analysis.jsonish import loads_lenient
from app.formats.template.analysis.tools import ToolAnalysis


def _get(obj: Any, path: str) -> Any:
    for key in path.split(".") if path else []:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _types(schema: dict[str, Any], name: str) -> set[str]:
    prop = (schema.get("properties") or {}).get(name)
    if not isinstance(prop, dict):
        return set()
    t = prop.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    if "enum" in prop and all(isinstance(x, str) for x in prop["enum"]):
        return {"string"}
    return set()


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,),
    "array": (list,), "null": (type(None),)}


def typed_value(raw: str, schema: dict[str, Any] | None, name: str) -> Any:
    """A tagged argument value typed by the tool's JSON schema."""
    types = _types(schema or {}, name)
    if types == {"string"}:
        return raw
    try:
        value = loads_lenient(raw.strip()) if types else json.loads(raw.strip())
    except ValueError:
        return raw
    if "string" in types:
        allowed = tuple(t for k in types - {"string"} for t in _JSON_TYPES.get(k, ()))
        return value if allowed and isinstance(value, allowed) else raw
    if not types and isinstance(value, str):
        return raw
    return value


class CallBuilder:
    """The call being read: its name, id and typed arguments until it is announced and
    completed through the shared :class:`~app.formats.parsing.parts.Parts`."""

    def __init__(self, tools: ToolAnalysis, schemas: dict[str, dict[str, Any]], parts: Parts) -> None:
        self._t = tools
        self._schemas = schemas
        self._parts = parts
        self._name: str | None = None
        self._id: str | None = None
        self._announced = False
        self._args: dict[str, Any] = {}

    @property
    def count(self) -> int:
        return self._parts.calls

    @property
    def active(self) -> bool:
        return self._name is not None

    def begin(self, name: str) -> None:
        self._name, self._id, self._announced, self._args = name, None, False, {}

    def cancel(self) -> None:
        self._name = None

    def set_id(self, call_id: str) -> None:
        self._id = call_id or None

    def started(self, out: list[ev.Event]) -> None:
        if self._name is None or self._announced:
            return
        self._announced = True
        self._parts.start_call(self._name, out, self._id)

    def done(self, arguments: str, out: list[ev.Event]) -> None:
        self.started(out)
        self._parts.arguments(arguments, out)
        self._parts.end_call(out)
        self._name = None

    def add_arg(self, name: str, raw: str) -> None:
        assert self._name is not None
        self._args[name] = typed_value(raw, self._schemas.get(self._name), name)

    def finish_tagged(self, out: list[ev.Event]) -> None:
        self.done(json.dumps(self._args, ensure_ascii=False), out)

    def finish_pending(self, out: list[ev.Event]) -> bool:
        """At end of input: a tagged call whose arguments are complete can be closed."""
        if self._name is not None and self._t.arg_name_prefix:
            self.finish_tagged(out)
            return True
        return False

    def from_json(self, item: Any, out: list[ev.Event]) -> bool:
        """A whole JSON_NATIVE call object → events; False if it has the wrong shape."""
        if not isinstance(item, dict):
            return False
        t = self._t
        if t.fun_name_is_key:
            if len(item) != 1:
                return False
            name, args = next(iter(item.items()))
        else:
            name, args = _get(item, t.name_field), _get(item, t.args_field)
        if not isinstance(name, str) or not name:
            return False
        if isinstance(args, str):
            try:
                args = loads_lenient(args) if args.strip() else {}
            except ValueError:
                return False
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return False
        self.begin(name)
        call_id = _get(item, t.id_field) if t.id_field else None
        if isinstance(call_id, str | int) and str(call_id):
            self._id = str(call_id)
        self.done(json.dumps(args, ensure_ascii=False), out)
        return True
