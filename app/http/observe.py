"""Pure ASGI middleware: request ids, structured access logs, request metrics.

Every response carries ``x-request-id`` (the client's, if it sent a sane one, else a
new one); one JSON log line per request records method, path, status, model, the API key's
name (never the key), prompt and completion tokens, duration and upstream time; the same
per-key numbers go to ``ocm_key_requests`` / ``ocm_key_tokens``.  A WebSocket session is one
line (method ``WEBSOCKET``, status 101 once accepted) with the tokens of all its responses.
An exception that escapes the app before its response started becomes a 500 with an OpenAI
error body and the request id (never a reset connection).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics as m
from app.core.errors import error_body
from app.core.ids import random_id
from app.http.responses import JSONResponse

log = logging.getLogger("ocm_gateway.access")
log_errors = logging.getLogger("ocm_gateway")
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _route(scope: Scope) -> str:
    path: str = scope.get("path", "")
    if path.startswith("/v1/responses/"):
        return "/v1/responses/{id}" + ("/input_items" if path.endswith("/input_items") else
                                       "/cancel" if path.endswith("/cancel") else "")
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    if path.startswith("/v1/conversations/"):
        return "/v1/conversations/{id}" + ("/items" if "/items" in path else "")
    return path if path in _KNOWN else "other"


_KNOWN = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/models", "/v1/conversations",
                    "/health", "/ready", "/metrics", "/ping", "/invocations", "/v1/completions",
                    "/v1/embeddings", "/tokenize", "/detokenize"})


def _key_name(scope: Scope) -> str | None:
    """The configured name of the request's API key (set by the auth middleware inside this
    one, in the shared ``state``); never the key itself."""
    key = scope.get("state", {}).get("api_key")
    name = getattr(key, "name", None)
    return name if isinstance(name, str) else None


def _request_id(scope: Scope) -> str:
    """The client's ``x-request-id`` if it is sane, else a new one (kept in ``state``)."""
    headers = scope.get("headers", ())
    incoming = next((v.decode("latin-1") for k, v in headers if k == b"x-request-id"), "")
    request_id = incoming if _SANE_ID.fullmatch(incoming) else random_id("req_")
    scope.setdefault("state", {})["request_id"] = request_id
    return request_id


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, metrics: m.Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        stats, token = m.begin(self.metrics)
        status = 500
        t0 = time.perf_counter()

        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:  # native code raises BaseExceptions too (a Rust panic)
            # A bug below: answer it here, with the request id and an OpenAI error body, rather
            # than let the server reset the connection. Once a response has started there is
            # nothing left to say but to end it.
            log_errors.exception("unhandled error (request %s)", request_id, exc_info=exc)
            if started:
                raise
            await JSONResponse(error_body("The gateway failed unexpectedly.", "server_error",
                                             "internal_error"), status_code=500)(scope, receive, send_wrapper)
        finally:
            m.end(token)
            self._record(scope, request_id, str(scope.get("method")), status, stats,
                         time.perf_counter() - t0)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One line and one count per WebSocket session (status 101 once accepted, the HTTP
        status of a refused upgrade), with the tokens of all its responses."""
        request_id = _request_id(scope)
        stats, token = m.begin(self.metrics)
        status = 500
        t0 = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            kind = message["type"]
            if kind == "websocket.accept":
                status = 101
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", request_id.encode())]
            elif kind == "websocket.http.response.start":
                status = message["status"]
            elif kind == "websocket.close" and status == 500:
                status = 403  # closed before accepting: the server refuses the upgrade
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            m.end(token)
            self._record(scope, request_id, "WEBSOCKET", status, stats, time.perf_counter() - t0)

    def _record(self, scope: Scope, request_id: str, method: str, status: int,
                stats: m.RequestStats, elapsed: float) -> None:
        route = _route(scope)
        self.metrics.requests.labels(route, stats.model or "-", str(status)).inc()
        if stats.upstream_seconds:
            self.metrics.overhead.labels(route).observe(max(0.0, elapsed - stats.upstream_seconds))
        key = _key_name(scope)
        self.metrics.key_requests.labels(key or "-", str(status)).inc()
        if stats.prompt_tokens or stats.completion_tokens:
            tokens = self.metrics.key_tokens
            tokens.labels(key or "-", stats.model or "-", "in").inc(stats.prompt_tokens)
            tokens.labels(key or "-", stats.model or "-", "out").inc(stats.completion_tokens)
        log.info(json.dumps({"request_id": request_id, "method": method,
                             "path": scope.get("path"), "status": status, "model": stats.model or None,
                             "key": key, "prompt_tokens": stats.prompt_tokens,
                             "completion_tokens": stats.completion_tokens,
                             "duration_ms": round(elapsed * 1000, 2),
                             "upstream_ms": round(stats.upstream_seconds * 1000, 2)}))
