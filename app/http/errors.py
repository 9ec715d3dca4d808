"""Exception handlers: every failure leaves as ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.core.errors import GatewayError, error_body
from app.http.body import BodyRejected
from app.http.responses import JSONResponse, error_response


def _param(loc: Sequence[Any]) -> str | None:
    parts = [p for p in loc if p not in ("body", "query", "path")]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p in ("str", "list[...]") or "[" in str(p) or str(p).startswith("function-"):
            continue  # pydantic union-branch labels, not user-visible field names
        else:
            out += ("." if out else "") + str(p)
    return out or None


def validation_message(errors: Sequence[Any]) -> tuple[str, str | None, str]:
    """(message, param, code) for pydantic's errors on a request body (also a WebSocket
    message's)."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return ("The request body is not valid JSON: " + str(first.get("ctx", {}).get("error", "")),
                None, "invalid_json")
    param = _param(first.get("loc", ()))
    msg = str(first.get("msg", "Invalid request."))
    if first.get("type") == "missing":
        return (f"Missing required parameter: {param!r}.", param, "missing_required_parameter")
    if first.get("type") == "extra_forbidden":
        return (f"Unrecognized request argument supplied: {param!r} (this gateway does not "
                "implement it).", param, "unknown_parameter")
    where = f" for {param!r}" if param else ""
    return (f"Invalid value{where}: {msg}", param, "invalid_value")


async def _gateway_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    message, param, code = validation_message(exc.errors())
    return JSONResponse(error_body(message, "invalid_request_error", code, param),
                        status_code=400)


def _static_route_matches(request: Request) -> bool:
    """Whether a route without path parameters has exactly this path (a real 405): with
    ``GET /v1/responses/{id}``, ``POST /v1/responses/nope`` is an unknown URL, not a
    method the resource lacks."""
    static: frozenset[str] = getattr(request.app.state, "static_paths", frozenset())
    return request.url.path in static


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if isinstance(exc, BodyRejected):
        return JSONResponse(error_body(str(exc.detail), "invalid_request_error", exc.code, exc.param),
                            status_code=400)
    status, headers = exc.status_code, exc.headers
    if status in (404, 405) and (status == 404 or not _static_route_matches(request)):
        return JSONResponse(error_body(f"Invalid URL ({request.method} {request.url.path})",
                                          "invalid_request_error", "not_found"), status_code=404)
    if status == 405:  # every route of this path, not only the first that matched it
        methods: dict[str, frozenset[str]] = getattr(request.app.state, "path_methods", {})
        if request.url.path in methods:
            headers = {**{k: v for k, v in (headers or {}).items() if k.lower() != "allow"},
                       "Allow": ", ".join(sorted(methods[request.url.path]))}
    code = {405: "method_not_allowed"}.get(status, "http_error")
    return JSONResponse(error_body(str(exc.detail), "invalid_request_error", code),
                        status_code=status, headers=headers)


def install(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    app.state.static_paths = frozenset(
        path for router in routers for route in router.routes
        if "{" not in (path := getattr(route, "path", "{")))
    methods: dict[str, set[str]] = {}
    for router in routers:
        for route in router.routes:
            methods.setdefault(getattr(route, "path", ""), set()).update(getattr(route, "methods", ()) or ())
    app.state.path_methods = {path: frozenset(m) for path, m in methods.items()}
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
