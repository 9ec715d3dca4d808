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
    if _LONG_NUMBER.search(raw):
        return json.loads(raw, parse_int=_check_int)
    return value


class JSONBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class GatewayRoute(APIRoute):
    """An ``APIRoute`` whose JSON body goes through :func:`parse_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(JSONBodyRequest(request.scope, request.receive))

        return route
