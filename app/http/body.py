"""Request bodies: JSON that every later layer can hold, or a 400 naming what is wrong.

Python's ``json`` accepts things the rest of the gateway cannot carry: lone UTF-16
surrogates (``"\\ud800"``: not Unicode, so neither UTF-8, openai-harmony nor orjson can
encode them), integers beyond 64 bits (orjson cannot serialise them into a stored response or
an upstream request), ``NaN`` / ``Infinity``. Bodies are parsed with orjson, which rejects the
first and the last; a body that may hold a 20-digit number is parsed again by ``json`` with an
integer hook, so a long digit run inside a string costs nothing more than a second parse.

:class:`GatewayRoute` makes FastAPI use this parser; its errors are :class:`BodyRejected`, an
``HTTPException`` (FastAPI lets those through its body reader) with an OpenAI ``code``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

INT64 = 2**63
_LONG_NUMBER = re.compile(rb"\d{19,}")
BIG_BODY = 1 << 20  # a larger body is parsed in a worker thread, its digit scan in slices this long


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


def parse_json(raw: bytes) -> Any:
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
    return any(_LONG_NUMBER.search(raw, i, i + BIG_BODY + 19) for i in range(0, len(raw), BIG_BODY))


class JSONBodyRequest(Request):
    body_field: Any = None  # the route's one (not embedded) body parameter, a FastAPI ModelField

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            self._json = (await asyncio.to_thread(_parse_large, raw, self.body_field)
                          if len(raw) > BIG_BODY else parse_json(raw))
        return self._json


def _parse_large(raw: bytes, field: Any) -> Any:
    """A large body parsed, and validated as the route's body model, in a worker thread: FastAPI
    then validates the model it gets in O(1) (a model instance is not validated again), where
    100,000 input items took 0.25 s of the event loop.  Invalid: the value as parsed, for
    FastAPI to report as it always does."""
    value = parse_json(raw)
    if field is None:
        return value
    checked, errors = field.validate(value, {}, loc=("body",))
    return value if errors else checked


class GatewayRoute(APIRoute):
    """An ``APIRoute`` whose JSON body goes through :func:`parse_json` (a large one in a worker
    thread, validated there too)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        params = self.dependant.body_params
        # one body parameter, not embedded: FastAPI validates the body itself against it
        field = self.body_field if len(params) == 1 and self.body_field is params[0] else None

        async def route(request: Request) -> Response:
            wrapped = JSONBodyRequest(request.scope, request.receive)
            wrapped.body_field = field
            return await handler(wrapped)

        return route
