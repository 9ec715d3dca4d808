"""Pure ASGI middleware: request ids, structured access logs, request metrics.

Every response carries ``x-request-id`` (the client's, if it sent a sane one, else a
new one); one JSON log line per request records method, path, status, model, the API key's
name (never the key), prompt and completion tokens, duration and upstream time; the same
per-key numbers go to ``ocm_key_requests`` / ``ocm_key_tokens``.  A WebSocket session is one
line (method ``WEBSOCKET``, status 101 once accepted) with the tokens of all its responses.
An exception that escapes the app before its response started becomes a 500 with an OpenAI
error body and the request id (never a reset connection).

With a :class:`~app.http.usage.UsageRecorder` each request that named a model is counted for
its key (tokens by kind, hosted-tool rounds, latency, the error code of a failed one: read
from the error body, or a stream's terminal error); a ``background`` response is counted when
its run ends.  A Batch API line (run in process by :mod:`app.http.internal`, which marks its
scope with :data:`~app.http.internal.BATCH`) is counted the same way under the model name
with :data:`BATCH_SUFFIX` (``"m (batch)"``: the same key, so its budget counts batch tokens,
priced as the model's), its ``ocm_requests`` route label carries the suffix too, and its log
line has ``"batch": true``.  The last :data:`RECENT_ERRORS` errors are kept for the operator console.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
import time
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics as m
from app.core import tracing
from app.core.errors import error_body
from app.core.ids import random_id
from app.http.internal import BATCH
from app.http.limits import Lease
from app.http.responses import JSONResponse
from app.http.usage import UsageRecorder, cost_of

log = logging.getLogger("ocm_gateway.access")
log_errors = logging.getLogger("ocm_gateway")
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
RECENT_ERRORS = 200
_GENERATION = frozenset({"/v1/chat/completions", "/v1/responses", "/invocations", "/v1/completions",
                         "/v1/embeddings", "/v1/messages"})
BATCH_SUFFIX = " (batch)"  # on the usage row's model and the metrics' route of a batch line
CHILDREN_CACHED = 4096  # metric children (label sets) remembered per middleware


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
                    "/v1/embeddings", "/tokenize", "/detokenize", "/v1/messages",
                    "/v1/messages/count_tokens"})


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


def _error_of(body: bytes) -> tuple[str | None, str]:
    """The ``code`` and ``message`` of an OpenAI error body (what fits in its first chunk)."""
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None, ""
    if not isinstance(error, dict):
        return None, ""
    code, message = error.get("code"), error.get("message")
    return (str(code) if code is not None else None,
            message[:300] if isinstance(message, str) else "")


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, metrics: m.Metrics, usage: UsageRecorder | None = None,
                 errors: collections.deque[dict[str, Any]] | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.usage = usage
        self.errors = errors if errors is not None else collections.deque(maxlen=RECENT_ERRORS)
        # (metric, *label values) -> the metric's child: ``labels()`` validates and takes a
        # lock each call (~2 µs, five a request); the child is the same object every time.
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, cached by the metric and all its label values (bounded:
        forgotten at :data:`CHILDREN_CACHED` entries; prometheus keeps its children anyway)."""
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= CHILDREN_CACHED:
                self._children.clear()
            child = self._children[key] = metric.labels(*values)
        return child

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        if tracing.enabled:
            await self._traced(scope, receive, send, request_id)
            return
        await self._http(scope, receive, send, request_id)

    async def _traced(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        """The request as one trace: a server span (child of the caller's ``traceparent``)
        current while the app runs, with the GenAI attributes once it is done."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())
                   if k in (b"traceparent", b"tracestate")}
        method, route = str(scope.get("method")), _route(scope)
        span = tracing.start(f"{method} {route}", {
            "http.request.method": method, "url.path": scope.get("path"), "http.route": route,
            "ocm.request_id": request_id}, kind="SERVER", carrier=headers)
        outcome: dict[str, Any] = {}
        try:
            with tracing.current(span):
                await self._http(scope, receive, send, request_id, outcome)
        finally:
            stats: m.RequestStats | None = outcome.get("stats")
            status = int(outcome.get("status", 500))
            span.set_attribute("http.response.status_code", status)
            key = _key_name(scope)
            if key:
                span.set_attribute("ocm.key", key)
            if stats is not None and stats.model:
                for name, value in (("gen_ai.operation.name", "chat"), ("gen_ai.request.model", stats.model),
                                    ("gen_ai.response.model", stats.model),
                                    ("gen_ai.usage.input_tokens", stats.prompt_tokens),
                                    ("gen_ai.usage.output_tokens", stats.completion_tokens),
                                    ("ocm.usage.reasoning_tokens", stats.reasoning_tokens),
                                    ("ocm.usage.cached_tokens", stats.cached_tokens),
                                    ("ocm.tool_rounds", stats.tool_rounds)):
                    span.set_attribute(name, value)
            if status >= 400 or (stats is not None and stats.error_code):
                tracing.failed(span, (stats.error_code if stats is not None else None) or str(status))
            span.end()

    async def _http(self, scope: Scope, receive: Receive, send: Send, request_id: str,
                    outcome: dict[str, Any] | None = None) -> None:
        stats, token = m.begin(self.metrics)
        status = 500
        t0 = time.perf_counter()

        started = False
        error_body_start = b""

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started, error_body_start
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", request_id.encode())]
            elif status >= 400 and not error_body_start and message["type"] == "http.response.body":
                error_body_start = message.get("body", b"")[:8192]
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
            if error_body_start and stats.error_code is None:
                stats.error_code, message = _error_of(error_body_start)
            else:
                message = ""
            self._record(scope, request_id, str(scope.get("method")), status, stats,
                         time.perf_counter() - t0, message)
            if outcome is not None:
                outcome.update(stats=stats, status=status)

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
                stats: m.RequestStats, elapsed: float, message: str = "") -> None:
        batch = bool(scope.get(BATCH))
        route = _route(scope) + (BATCH_SUFFIX if batch else "")
        if status >= 400 or stats.error_code is not None:
            self.errors.append({"time": time.time(), "request_id": request_id, "status": status,
                                "code": stats.error_code, "message": message, "method": method,
                                "path": scope.get("path"), "key": _key_name(scope),
                                "model": stats.model or None})
        if self.usage is not None and (stats.model or scope.get("path") in _GENERATION):
            self._account(scope, stats, elapsed, status)
        metrics, child = self.metrics, self._child
        model = stats.model or "-"
        child(metrics.requests, route, model, str(status)).inc()
        if stats.upstream_seconds:
            child(metrics.overhead, route).observe(max(0.0, elapsed - stats.upstream_seconds))
        key = _key_name(scope)
        child(metrics.key_requests, key or "-", str(status)).inc()
        if stats.prompt_tokens or stats.completion_tokens:
            child(metrics.key_tokens, key or "-", model, "in").inc(stats.prompt_tokens)
            child(metrics.key_tokens, key or "-", model, "out").inc(stats.completion_tokens)
        line = {"request_id": request_id, "method": method,
                "path": scope.get("path"), "status": status, "model": stats.model or None,
                "key": key, "prompt_tokens": stats.prompt_tokens,
                "completion_tokens": stats.completion_tokens,
                "duration_ms": round(elapsed * 1000, 2),
                "upstream_ms": round(stats.upstream_seconds * 1000, 2)}
        if stats.steps:  # the agentic loop's generations, each with its usage
            line["steps"] = stats.steps
        if batch:
            line["batch"] = True
        log.info(json.dumps(line))

    def _account(self, scope: Scope, stats: m.RequestStats, elapsed: float, status: int) -> None:
        """Count the request for its key; a background run's tokens once its run has ended."""
        assert self.usage is not None
        usage = self.usage
        state = scope.get("state", {})
        key, name = state.get("api_key"), _key_name(scope) or "-"
        error = stats.error_code or (str(status) if status >= 400 else None)
        lease: Lease | None = state.get("limits_lease")
        counted = (0, 0, 0, 0, 0)
        suffix = BATCH_SUFFIX if scope.get(BATCH) else ""

        def count(requests: int, seconds: float | None, error_code: str | None) -> None:
            nonlocal counted
            now = (stats.prompt_tokens, stats.cached_tokens, stats.completion_tokens,
                   stats.reasoning_tokens, stats.tool_rounds)
            delta = [a - b for a, b in zip(now, counted, strict=True)]
            counted = now
            model = stats.model or "-"
            usage.record(name, model + suffix, input_tokens=delta[0], cached_tokens=delta[1],
                         output_tokens=delta[2], reasoning_tokens=delta[3], tool_rounds=delta[4],
                         error_code=error_code, seconds=seconds, requests=requests,
                         cost=cost_of(key, model, delta[0], delta[2]))

        if lease is not None and lease.detached and not lease.released:  # a background run
            lease.after.append(lambda: count(1, elapsed, stats.error_code or error))
        else:
            count(1, elapsed, error)
