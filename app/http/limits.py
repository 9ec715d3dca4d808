"""Request limits as pure ASGI middleware: body size, requests / tokens per minute, concurrency.

Limits apply per API key (or per client address when auth is off): requests per minute on
every route that writes or computes (generations, and every POST / DELETE: conversations,
compaction, token counts, ``/tokenize``), tokens per minute and concurrency on the generation
routes.  A ``background`` response holds its concurrency slot, and its tokens are charged,
until its run ends, not when its request returns (:class:`Lease`).
Over a per-minute budget → 429 with ``Retry-After`` and ``retry-after-ms``;
a body over ``max_body_bytes`` → 413 (checked on ``content-length`` and while reading; the
body is read here, once, and replayed to the app).
Token usage is charged when a request finishes (from the pipeline's request stats).
When the gateway is at capacity (every admission slot and the whole queue taken) a
generation request is refused with 503 before its body is even read.
On a WebSocket (Responses' WebSocket mode) each message is a request under the same per-key
limits: the socket's session checks them through :class:`TurnLimits` (``scope["state"]["limits"]``).
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.config import ApiKey, LimitSettings
from app.core.errors import GatewayError, Overloaded, error_body
from app.engine.admission import Admission
from app.http.responses import JSONResponse, error_response

GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/responses", "/invocations",
                              "/v1/completions", "/v1/embeddings"})
WINDOW = 60.0


@dataclass
class _Usage:
    requests: collections.deque[float] = field(default_factory=collections.deque)
    tokens: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)
    in_flight: int = 0
    sockets: int = 0  # open WebSockets

    token_total: int = 0  # the sum over ``tokens``, kept as they come and go

    def prune(self, now: float) -> None:
        while self.requests and self.requests[0] <= now - WINDOW:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW:
            self.token_total -= self.tokens.popleft()[1]

    def add_tokens(self, now: float, n: int) -> None:
        self.tokens.append((now, n))
        self.token_total += n


class LimitsMiddleware:
    def __init__(self, app: ASGIApp, settings: LimitSettings, admission: Admission | None = None) -> None:
        self.app = app
        self.settings = settings
        self.admission = admission
        self.usage: dict[str, _Usage] = collections.defaultdict(_Usage)

    def _limits(self, key: ApiKey | None) -> tuple[int | None, int | None, int | None]:
        s = self.settings
        if key is None:
            return s.requests_per_minute, s.tokens_per_minute, s.max_concurrent
        return (key.requests_per_minute or s.requests_per_minute,
                key.tokens_per_minute or s.tokens_per_minute, key.max_concurrent or s.max_concurrent)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, status: int, message: str,
                      code: str, retry_after: float | None = None) -> None:
        headers = {}
        if retry_after is not None:
            headers = {"retry-after": str(max(1, math.ceil(retry_after))),
                       "retry-after-ms": str(max(1, math.ceil(retry_after * 1000)))}
        type_ = "rate_limit_error" if status == 429 else "invalid_request_error"
        await JSONResponse(error_body(message, type_, code), status_code=status,
                           headers=headers)(scope, receive, send)

    def _usage(self, scope: Scope) -> tuple[_Usage, float]:
        key: ApiKey | None = scope.get("state", {}).get("api_key")
        usage = self.usage[f"key:{key.name}" if key else f"addr:{(scope.get('client') or ('?',))[0]}"]
        now = time.monotonic()
        usage.prune(now)
        return usage, now

    def _refusal(self, scope: Scope, usage: _Usage, now: float, *,
                 concurrency: bool = True) -> RateLimited | None:
        rpm, tpm, concurrent = self._limits(scope.get("state", {}).get("api_key"))
        if not concurrency:
            tpm = concurrent = None  # a request that generates nothing: its rate only
        if rpm is not None and len(usage.requests) >= rpm:
            return RateLimited(f"Rate limit: {rpm} requests per minute.", usage.requests[0] + WINDOW - now)
        if tpm is not None and usage.token_total >= tpm:
            return RateLimited(f"Rate limit: {tpm} tokens per minute.", usage.tokens[0][0] + WINDOW - now)
        if concurrent is not None and usage.in_flight >= concurrent:
            return RateLimited(f"Too many concurrent requests (limit {concurrent}).", 1.0,
                               code="concurrency_limit_exceeded")
        return None

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A Responses WebSocket: at most ``max_websockets`` open per key (a 429 instead of the
        upgrade beyond), each message a request under the key's limits (:class:`TurnLimits`)."""
        usage, _ = self._usage(scope)
        cap = self.settings.max_websockets
        if usage.sockets >= cap:
            message = await receive()  # websocket.connect
            if message["type"] == "websocket.connect":
                await self._refuse_upgrade(send, f"Too many open WebSockets for this key (limit {cap}).")
            return
        usage.sockets += 1
        scope.setdefault("state", {})["limits"] = TurnLimits(self, scope)  # checked per message
        try:
            await self.app(scope, receive, send)
        finally:
            usage.sockets -= 1

    @staticmethod
    async def _refuse_upgrade(send: Send, message: str) -> None:
        body = orjson.dumps(error_body(message, "rate_limit_error", "too_many_websockets"))
        await send({"type": "websocket.http.response.start", "status": 429, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1")]})
        await send({"type": "websocket.http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] in GENERATION_PATHS:
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.settings.max_body_bytes
        length = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > limit:
            await self._reject(scope, receive, send, 413, f"Request body over {limit} bytes.",
                               "request_too_large")
            return
        generation = scope["path"] in GENERATION_PATHS and scope.get("method") == "POST"
        if generation and self.admission is not None:
            try:  # at capacity: refuse before reading or parsing anything
                self.admission.check()
            except Overloaded as exc:
                await error_response(exc)(scope, receive, send)
                return
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            try:
                async with asyncio.timeout(self.settings.body_timeout):  # cheaper than anyio's
                    body = await _read_body(receive, limit)
            except TimeoutError:
                await self._reject(scope, receive, send, 408, "The request body did not arrive within "
                                   f"{self.settings.body_timeout:g} s.", "request_timeout")
                return
            if body is None:
                await self._reject(scope, receive, send, 413, f"Request body over {limit} bytes.",
                                   "request_too_large")
                return
            receive = _replay(body, receive)
        counted = generation or scope.get("method") in ("POST", "PUT", "PATCH", "DELETE")
        if not counted:
            await self.app(scope, receive, send)
            return
        usage, now = self._usage(scope)
        refused = self._refusal(scope, usage, now, concurrency=generation)
        if refused is not None:
            await self._reject(scope, receive, send, 429, refused.message, str(refused.code),
                               refused.retry_after)
            return
        usage.requests.append(now)
        if not generation:
            await self.app(scope, receive, send)
            return
        usage.in_flight += 1
        lease = Lease(usage)
        scope.setdefault("state", {})["limits_lease"] = lease
        try:
            await self.app(scope, receive, send)
        finally:
            if not lease.detached:
                stats = metrics.current()
                lease.release(stats.tokens if stats is not None else 0)


class Lease:
    """A generation request's concurrency slot: released (and its tokens charged) when the
    request returns, or, once :meth:`detach` ed, by whoever took it (a background run, when
    it ends)."""

    def __init__(self, usage: _Usage) -> None:
        self._usage = usage
        self.detached = False
        self._released = False

    def detach(self) -> Callable[[int], None]:
        self.detached = True
        return self.release

    def release(self, tokens: int) -> None:
        if self._released:
            return
        self._released = True
        self._usage.in_flight -= 1
        if tokens:
            self._usage.add_tokens(time.monotonic(), tokens)


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after: float, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class TurnLimits:
    """The same per-key limits for the messages of one WebSocket (each ``response.create`` is a
    request): :meth:`admit` before a turn (raises :class:`RateLimited`), :meth:`done` after."""

    def __init__(self, limits: LimitsMiddleware, scope: Scope) -> None:
        self._limits = limits
        self._scope = scope

    def admit(self) -> None:
        usage, now = self._limits._usage(self._scope)
        refused = self._limits._refusal(self._scope, usage, now)
        if refused is not None:
            raise refused
        usage.requests.append(now)
        usage.in_flight += 1

    def done(self, tokens: int) -> None:
        usage, now = self._limits._usage(self._scope)
        usage.in_flight -= 1
        if tokens:
            usage.add_tokens(now, tokens)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it grows past ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # disconnect: the app will notice on its own receive
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            return None
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped
