"""Request bodies: JSON that every later layer can hold, or a 400 naming what is wrong.

Python's ``json`` accepts things the rest of the gateway cannot carry: lone UTF-16
surrogates (``"\\ud800"``: not Unicode, so neither UTF-8, openai-harmony nor orjson can
encode them), integers beyond 64 bits (orjson cannot serialise them into a stored response or
an upstream request), ``NaN`` / ``Infinity``. Bodies are parsed with orjson, which rejects the
first and the last; a body that may hold a 20-digit number is parsed again by ``json`` with an
integer hook, so a long digit run inside a string costs nothing more than a second parse.

:class:`GatewayRoute` makes FastAPI use this parser; its errors are :class:`BodyRejected`, an
``HTTPException`` (FastAPI lets those through its body reader) with an OpenAI ``code``.

A route whose endpoint takes only the body model and the ``Request`` and returns a ``Response``
(the hot routes) is called directly (:func:`_direct`): the body read, parsed and validated as
FastAPI's handler does it (the same ``ModelField.validate``, the same ``RequestValidationError``
and ``HTTPException`` on failure), without its dependency solving (the route alone: ~100 → ~57
µs a request, ``python -m benchmarks.bench_request_side``).  Anything off that path (no
``application/json`` content type, an empty or large body, Starlette's own body limit) goes
through FastAPI's handler as before.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from annotated_types import MinLen
from fastapi import params
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.requests import Request
from starlette.responses import Response

from app.core.shed import shed, shed_later
from app.http.big_json import loads_in_pieces, loads_long_strings
from app.http.gc_hold import HOLD

INT64 = 2**63
_LONG_NUMBER = re.compile(rb"\d{19,}")
BIG_BODY = 1 << 20  # a larger body is parsed in a worker thread
SCAN = 1 << 16  # its digit scan in slices this long (~1 ms each: the GIL is given back between)
CHUNK = 1000  # items of a body's long list validated per call (~2-4 ms: the GIL is given back between)


class BodyRejected(HTTPException):
    def __init__(self, message: str, code: str, param: str | None = None) -> None:
        super().__init__(status_code=400, detail=message)
        self.code = code
        self.param = param


def _check_int(text: str) -> int:
    value = int(text)
    if not -INT64 <= value < INT64:
        raise BodyRejected(f"The integer {text[:24]}{'...' if len(text) > 24 else ''} is out of range "
                           "(a JSON integer in a request must fit in 64 bits).", "integer_out_of_range")
    return value


def parse_json(raw: bytes, pieces: bool = False) -> Any:
    """``raw`` parsed, or :class:`BodyRejected`; ``pieces`` (a worker thread's big body): its
    long item list parsed a piece at a time where that is certain to give the same value
    (:mod:`app.http.big_json`: one ``orjson.loads`` of 3.9 MB held the GIL ~35 ms)."""
    value = None
    if pieces:  # the item list in pieces, else the long strings in pieces
        value = loads_in_pieces(raw)
        if value is None:
            value = loads_long_strings(raw)
    if value is not None:
        return json.loads(raw, parse_int=_check_int) if _has_long_number(raw) else value
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        reason = str(exc)
        if "surrogate" in reason:
            raise BodyRejected("The request body contains a lone UTF-16 surrogate (such as \\ud800), "
                               "which is not Unicode text.", "invalid_unicode") from None
        if "utf-8" in reason.lower():
            raise BodyRejected("The request body is not valid UTF-8.", "invalid_unicode") from None
        raise BodyRejected(f"The request body is not valid JSON: {reason}", "invalid_json") from None
    if _has_long_number(raw):
        return json.loads(raw, parse_int=_check_int)
    return value


def _has_long_number(raw: bytes) -> bool:
    """Whether ``raw`` has a run of 19 digits, scanned in slices (overlapping by a run's length)
    so that a thread doing it gives the GIL back between them (14 MB take ~150 ms)."""
    if len(raw) <= SCAN:
        return _LONG_NUMBER.search(raw) is not None
    return any(_LONG_NUMBER.search(raw, i, i + SCAN + 19) for i in range(0, len(raw), SCAN))


def is_big(request: Request) -> bool:
    """Whether ``request``'s JSON body was over :data:`BIG_BODY` bytes: parsed and validated in
    a worker thread, and its route converts, checks and frees it off the event loop too."""
    return isinstance(request, JSONBodyRequest) and request.release is not None


class JSONBodyRequest(Request):
    body_field: Any = None  # the route's one (not embedded) body parameter, a FastAPI ModelField
    release: Callable[[], None] | None = None  # a large body's hold on full collections

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            if len(raw) > BIG_BODY:
                # its million objects would start full collections that scan them (gc_hold.py)
                if self.release is None:
                    self.release = HOLD.acquire()
                self._json = await asyncio.to_thread(_parse_large, raw, self.body_field)
            else:
                self._json = parse_json(raw)
        return self._json


def _parse_large(raw: bytes, field: Any) -> Any:
    """A large body parsed, and validated as the route's body model, in a worker thread: FastAPI
    then validates the model it gets in O(1) (a model instance is not validated again), where
    100,000 input items took 0.25 s of the event loop.  Invalid: the value as parsed, for
    FastAPI to report as it always does."""
    value = parse_json(raw, pieces=True)
    if field is None:
        return value
    checked, errors = validate_body(field, value)
    if errors:
        return value
    kept = {id(v) for v in (*vars(checked).values(), *(checked.__pydantic_extra__ or {}).values())} \
        if isinstance(checked, BaseModel) else set()
    for items in _long_lists(value):  # the model's own lists hold what it needs of them
        if id(items) not in kept:
            shed(items)
    return checked


def validate_body(field: Any, value: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``field.validate(value)`` (FastAPI's ``(model, errors)``), a long list (``input``,
    ``messages``) in pieces of :data:`CHUNK` items: one pydantic-core call over 100,000 items
    holds the GIL ~45 ms, and the thread switch interval cannot break into it.  The model is
    validated with the list's first piece, the rest item by item in pieces; a body any of
    them refuses is validated again in one call, so its errors are exactly FastAPI's."""
    model = getattr(field.field_info, "annotation", None)
    split = _long_list(model, value) if isinstance(value, dict) else None
    if split is not None:
        name, items = split
        head, errors = field.validate({**value, name: items[:CHUNK]}, {}, loc=("body",))
        if not errors:
            adapter = _item_list(model, name)
            try:
                rest = [item for i in range(CHUNK, len(items), CHUNK)
                        for item in adapter.validate_python(items[i:i + CHUNK], from_attributes=True)]
            except ValidationError:
                pass
            else:
                return head.model_copy(update={name: [*getattr(head, name), *rest]}), []
    result: tuple[Any, list[dict[str, Any]]] = field.validate(value, {}, loc=("body",))
    return result


def _long_lists(body: Any) -> list[list[Any]]:
    """A parsed body's lists of more than :data:`CHUNK` items (its model's, or its own)."""
    fields = vars(body) if isinstance(body, BaseModel) else body if isinstance(body, dict) else {}
    return [value for value in fields.values() if isinstance(value, list) and len(value) > CHUNK]


def _long_list(model: Any, value: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """The field of ``value`` holding more than :data:`CHUNK` items that may be validated in
    pieces: a plain ``list[X]`` (at most a ``min_length`` no larger than a piece) of a body
    model whose only validator is the top-level null filter (nothing looks across items)."""
    for name, items in value.items():
        if isinstance(items, list) and len(items) > CHUNK and _item_type(model, name) is not None:
            return name, items
    return None


@functools.cache
def _item_type(model: Any, name: str) -> Any:
    if not (isinstance(model, type) and issubclass(model, BaseModel)) or name not in model.model_fields:
        return None
    decorators = model.__pydantic_decorators__
    if set(decorators.model_validators) - {"_drop_nulls"} or decorators.field_validators:
        return None
    info = model.model_fields[name]
    if info.alias not in (None, name) or any(not (isinstance(m, MinLen) and m.min_length <= CHUNK)
                                              for m in info.metadata):
        return None
    annotation = info.annotation
    arms = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    lists = [arm for arm in arms if typing.get_origin(arm) is list]
    return typing.get_args(lists[0])[0] if len(lists) == 1 else None


@functools.cache
def _item_list(model: Any, name: str) -> TypeAdapter[list[Any]]:
    """A validator of the field's items with the model's strictness (a list field of it
    validates them so)."""
    item: Any = _item_type(model, name)
    return TypeAdapter(list[item], config=ConfigDict(strict=bool(model.model_config.get("strict"))))


class GatewayRoute(APIRoute):
    """An ``APIRoute`` whose JSON body goes through :func:`parse_json` (a large one in a worker
    thread, validated there too, and full collections held until the route has answered); an
    endpoint of (body, request) is called directly (see the module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        params_ = self.dependant.body_params
        # one body parameter, not embedded: FastAPI validates the body itself against it
        field = self.body_field if len(params_) == 1 and self.body_field is params_[0] else None
        names = _direct_call(self.dependant, field)

        async def route(request: Request) -> Response:
            wrapped = JSONBodyRequest(request.scope, request.receive)
            wrapped.body_field = field
            try:
                if names is not None:
                    response = await _direct(wrapped, field, names)
                    if response is not None:
                        return response
                return await handler(wrapped)
            finally:  # the answer is made (a stream's run planned): full collections again
                if wrapped.release is not None:
                    wrapped.release()
                    shed_later(*_long_lists(getattr(wrapped, "_json", None)))  # not all at once here

        return route


DirectCall = tuple[Callable[..., Coroutine[Any, Any, Response]], str, str]


def _direct_call(dependant: Dependant, field: Any) -> DirectCall | None:
    """(endpoint, body parameter, request parameter) of an ``async def endpoint(body: Model,
    request: Request) -> Response`` with nothing else for FastAPI to solve, else ``None``."""
    call = dependant.call
    if field is None or call is None or dependant.request_param_name is None \
            or isinstance(field.field_info, params.Form) or not inspect.iscoroutinefunction(call):
        return None
    others = (dependant.path_params, dependant.query_params, dependant.header_params,
              dependant.cookie_params, dependant.dependencies, dependant.websocket_param_name,
              dependant.http_connection_param_name, dependant.response_param_name,
              dependant.background_tasks_param_name, dependant.security_scopes_param_name)
    if any(others):
        return None
    try:
        returns = typing.get_type_hints(call).get("return")
    except (NameError, TypeError):
        return None
    if not (isinstance(returns, type) and issubclass(returns, Response)):
        return None
    return call, field.name, dependant.request_param_name


async def _direct(request: JSONBodyRequest, field: Any, names: DirectCall) -> Response | None:
    """The endpoint's response for a JSON body of at most :data:`BIG_BODY` bytes, read, parsed
    and validated as FastAPI's handler does it; ``None``: a request for that handler."""
    if MAX_BODY_SIZE_SCOPE_KEY in request.scope or not _is_json(request.scope):
        return None
    try:
        raw = await request.body()
    except HTTPException:
        raise
    except Exception as exc:  # FastAPI's answer to a body that could not be read
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc
    if not raw or len(raw) > BIG_BODY:
        return None
    value = request._json = parse_json(raw)
    checked, errors = field.validate(value, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors, body=value)
    call, body_name, request_name = names
    return await call(**{body_name: checked, request_name: request})


def _is_json(scope: Any) -> bool:
    """Whether the request's first ``content-type`` is ``application/json`` (with parameters
    or not): one FastAPI reads as JSON too."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return bool(kind == b"application/json")
    return False
