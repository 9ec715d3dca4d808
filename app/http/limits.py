"""Request limits as pure ASGI middleware: body size, requests / tokens per minute, concurrency.

Limits apply per API key (or per client address when auth is off): requests per minute on
every route that writes or computes (generations, and every POST / DELETE: conversations,
compaction, token counts, ``/tokenize``), tokens per minute and concurrency on the generation
routes.  A ``background`` response holds its concurrency slot, and its tokens are charged,
until its run ends, not when its request returns (:class:`Lease`).
Over a per-minute budget → 429 with ``Retry-After`` and ``retry-after-ms``;
a body over ``max_body_bytes`` → 413 (checked on ``content-length`` and while reading; the
body is read here, once, and replayed to the app); uploads (``streamed``: ``POST /v1/files``)
are checked on ``content-length`` against their own cap and left to their route to read.
Token usage is charged when a request finishes (from the pipeline's request stats).
A key with a budget (:class:`~app.http.usage.Budgets`) that has spent it gets a 429
``insufficient_quota`` on the generation routes until its period resets.
When the gateway is at capacity (every admission slot and the whole queue taken) a
generation request is refused with 503 before its body is even read.
On a WebSocket (Responses' WebSocket mode) each message is a request under the same per-key
limits: the socket's session checks them through :class:`TurnLimits` (``scope["state"]["limits"]``).
"""

from __future__ import annotations

import asyncio
import collections
import math
import re
import uuid
from collections.abc import Callable, Mapping

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.config import ApiKey, LimitSettings
from app.core.errors import GatewayError, Overloaded, error_body
from app.engine.admission import Admission
from app.http.counters import Budget, Counters, CountersUnavailable, LocalCounters
from app.http.machine_counters import MachineCounters
from app.http.responses import JSONResponse, error_response
from app.http.usage import Budgets

GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/responses", "/invocations",
                              "/v1/completions", "/v1/embeddings", "/v1/messages"})
WINDOW = 60.0
BIG_JOIN = 1 << 20  # bytes: a larger body's chunks are joined in a worker thread
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]{1,256})"')


def asked_model(body: bytes, models: Mapping[str, str]) -> str | None:
    """The configured model a refused request asked for (its usage row and metrics label), read
    from the raw body without parsing it: the first ``"model": "..."`` that names a configured
    model or alias (at most 8 looked at; any other string is not a label, so a flood of made-up
    names cannot create usage rows)."""
    for i, match in enumerate(_MODEL.finditer(body)):
        name = models.get(match.group(1).decode("utf-8", "replace"))
        if name is not None or i >= 7:
            return name
    return None


class LimitsMiddleware:
    def __init__(self, app: ASGIApp, settings: LimitSettings, admission: Admission | None = None,
                 counters: Counters | None = None, budgets: Budgets | None = None,
                 streamed: dict[str, int] | None = None, models: Mapping[str, str] | None = None) -> None:
        self.app = app
        self.models = models or {}  # name or alias -> model: a refused request's usage label
        self.settings = settings
        # POST paths whose route reads its own body as it streams (uploads), with their cap
        # on content-length: never buffered here (app/http/multipart.py bounds them as they arrive)
        self.streamed = streamed or {}
        self.admission = admission
        self.budgets = budgets
        self.counters: Counters = counters if counters is not None else LocalCounters()
        self.sockets: dict[str, int] = collections.defaultdict(int)  # open WebSockets (per process)

    def _budget(self, scope: Scope) -> Budget:
        key: ApiKey | None = scope.get("state", {}).get("api_key")
        s = self.settings
        if key is None:
            return Budget(s.requests_per_minute, s.tokens_per_minute, s.max_concurrent)
        return Budget(key.requests_per_minute or s.requests_per_minute,
                      key.tokens_per_minute or s.tokens_per_minute, key.max_concurrent or s.max_concurrent)

    async def check_budget(self, scope: Scope) -> None:
        key: ApiKey | None = scope.get("state", {}).get("api_key")
        if key is not None and key.budget is not None and self.budgets is not None:
            await self.budgets.check(key)

    def _label(self, body: bytes | None, generation: bool) -> None:
        """A refused generation is counted for the model it asked for, not for ``-``."""
        stats = metrics.current()
        if generation and body and stats is not None and not stats.model:
            stats.model = asked_model(body, self.models) or ""

    @staticmethod
    def who(scope: Scope) -> str:
        key: ApiKey | None = scope.get("state", {}).get("api_key")
        return f"key:{key.name}" if key else f"addr:{(scope.get('client') or ('?',))[0]}"

    async def _reject(self, scope: Scope, receive: Receive, send: Send, status: int, message: str,
                      code: str, retry_after: float | None = None) -> None:
        headers = {}
        if retry_after is not None:
            headers = {"retry-after": str(max(1, math.ceil(retry_after))),
                       "retry-after-ms": str(max(1, math.ceil(retry_after * 1000)))}
        type_ = "rate_limit_error" if status == 429 else "invalid_request_error"
        await JSONResponse(error_body(message, type_, code), status_code=status,
                           headers=headers)(scope, receive, send)

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A Responses WebSocket: at most ``max_websockets`` open per key (a 429 instead of the
        upgrade beyond), each message a request under the key's limits (:class:`TurnLimits`)."""
        who = self.who(scope)
        cap = self.settings.max_websockets
        machine = self.counters if isinstance(self.counters, MachineCounters) else None
        place, refusal = None, None  # serve --workers N without Redis: one count for the machine
        try:
            if machine is not None:
                place = await machine.open_socket(who, cap)
        except CountersUnavailable as exc:  # 503, as every counted request gets then
            refusal = exc
        if refusal is not None or (place is None if machine is not None else self.sockets[who] >= cap):
            message = await receive()  # websocket.connect
            if message["type"] == "websocket.connect":
                await self._refuse_upgrade(send, f"Too many open WebSockets for this key (limit {cap}).",
                                           refusal)
            return
        self.sockets[who] += 1
        scope.setdefault("state", {})["limits"] = TurnLimits(self, scope)  # checked per message
        try:
            await self.app(scope, receive, send)
        finally:
            self.sockets[who] -= 1
            if machine is not None and place is not None:
                machine.close_socket(place)

    @staticmethod
    async def _refuse_upgrade(send: Send, message: str, down: GatewayError | None = None) -> None:
        status, err = 429, error_body(message, "rate_limit_error", "too_many_websockets")
        if down is not None:  # the machine's counter service is unavailable
            status, err = down.status, error_body(down.message, down.type, down.code)
        body = orjson.dumps(err)
        await send({"type": "websocket.http.response.start", "status": status, "headers": [
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
        streamed = self.streamed.get(scope["path"]) if scope.get("method") == "POST" else None
        limit = self.settings.max_body_bytes if streamed is None else streamed
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
        if scope.get("method") in ("POST", "PUT", "PATCH") and streamed is None:
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
        else:
            body = None
        counted = generation or scope.get("method") in ("POST", "PUT", "PATCH", "DELETE")
        if not counted:
            await self.app(scope, receive, send)
            return
        who, slot = self.who(scope), uuid.uuid4().hex
        try:
            if generation:
                await self.check_budget(scope)
            refused = await self.counters.admit(who, self._budget(scope), generation=generation, lease=slot)
        except GatewayError as exc:  # over budget, or the shared counters / store are down
            self._label(body, generation)
            await error_response(exc)(scope, receive, send)
            return
        if refused is not None:
            self._label(body, generation)
            await self._reject(scope, receive, send, 429, refused.message, str(refused.code),
                               refused.retry_after)
            return
        if not generation:
            await self.app(scope, receive, send)
            return
        lease = Lease(self.counters, who, slot)
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

    def __init__(self, counters: Counters, who: str, slot: str) -> None:
        self._counters, self._who, self._slot = counters, who, slot
        self.detached = False
        self._released = False
        self.after: list[Callable[[], None]] = []  # told once released (usage accounting)

    @property
    def released(self) -> bool:
        return self._released

    def detach(self) -> Callable[[int], None]:
        self.detached = True
        return self.release

    def release(self, tokens: int) -> None:
        if self._released:
            return
        self._released = True
        self._counters.release(self._who, self._slot, tokens)
        for then in self.after:
            then()


class TurnLimits:
    """The same per-key limits for the messages of one WebSocket (each ``response.create`` is a
    request): :meth:`admit` before a turn (raises :class:`RateLimited`), :meth:`done` after."""

    def __init__(self, limits: LimitsMiddleware, scope: Scope) -> None:
        self._limits = limits
        self._scope = scope
        self._slot: str | None = None

    async def admit(self) -> None:
        slot = uuid.uuid4().hex
        limits = self._limits
        await limits.check_budget(self._scope)
        refused = await limits.counters.admit(limits.who(self._scope), limits._budget(self._scope),
                                              generation=True, lease=slot)
        if refused is not None:
            raise refused
        self._slot = slot

    def done(self, tokens: int) -> None:
        if self._slot is not None:
            Lease(self._limits.counters, self._limits.who(self._scope), self._slot).release(tokens)
            self._slot = None


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
            # joining a big body touches as many new pages (14 MB: 2-50 ms); bytes.join gives
            # the GIL back while it copies 1 MB or more, so in a thread the loop goes on
            return await asyncio.to_thread(b"".join, chunks) if size > BIG_JOIN else b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped
