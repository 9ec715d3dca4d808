"""API-key authentication as pure ASGI middleware (no BaseHTTPMiddleware).

Keys are configured as SHA-256 digests; a request's ``Authorization: Bearer KEY`` (or ``x-api-key``) is
hashed and compared in constant time; a digest that is no config-file key is looked up among
the keys made through the admin API (:mod:`app.http.keys`, cached a few seconds).  An expired
key gets its own 401.  ``/admin`` and ``/console`` are not checked here: they take the admin
key only (:mod:`app.api.admin.auth`), never an ordinary one.  Health, readiness, metrics and
the API docs stay open.  The matched key is put in ``scope["state"]["api_key"]`` so routes can apply its model
allow-list (:func:`check_model`) and scope what they store to its tenant (:func:`principal`).
WebSocket upgrades (``GET /v1/responses``) are checked the same way: a bad key gets the same
401 instead of the upgrade (or, on a server without the denial-response extension, the
handshake is closed with 1008, which the server answers with 403).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from app.config import ApiKey
from app.core.access import ANONYMOUS, Principal
from app.core.errors import GatewayError, ModelNotFound, error_body
from app.http.internal import KEY_DIGEST
from app.http.keys import KeyResolver
from app.http.responses import JSONResponse, error_response

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics", "/ping", "/docs", "/openapi.json"})
ADMIN_PREFIXES = ("/admin/", "/console")


def bearer_digest(scope: Scope, *, x_api_key: bool = False) -> str | None:
    """The SHA-256 hex digest of the request's key (None: no usable header): ``Authorization:
    Bearer KEY``, else (``x_api_key``: API keys, not the admin key) ``x-api-key: KEY``, which
    Anthropic's SDKs and Claude Code send."""
    api_key = None
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            return hashlib.sha256(token.strip().encode()).hexdigest()
        if x_api_key and name == b"x-api-key" and api_key is None:
            api_key = value.decode("latin-1").strip()
    return hashlib.sha256(api_key.encode()).hexdigest() if api_key else None


def is_admin_path(path: str) -> bool:
    return path == "/admin" or path.startswith(ADMIN_PREFIXES)


class AuthMiddleware:
    def __init__(self, app: ASGIApp, keys: list[ApiKey], resolver: KeyResolver | None = None) -> None:
        self.app = app
        self.keys = keys
        self.resolver = resolver

    async def _match(self, scope: Scope) -> ApiKey | None:
        digest = scope.get(KEY_DIGEST) or bearer_digest(scope, x_api_key=True)  # in process: internal.py
        if digest is None:
            return None
        for key in self.keys:
            if hmac.compare_digest(digest, key.sha256):
                return key
        return await self.resolver.find(digest) if self.resolver is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS
                or is_admin_path(scope["path"])):
            await self.app(scope, receive, send)
            return
        try:
            key = await self._match(scope)
        except GatewayError as exc:  # the key store is down
            await error_response(exc)(scope, receive, send)
            return
        message = "Missing or invalid API key. Send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."
        if key is not None and key.expires_at is not None and key.expires_at <= time.time():
            message, key = "This API key has expired.", None
        if key is None:
            body = error_body(message, "invalid_request_error", "invalid_api_key")
            response = JSONResponse(body, status_code=401, headers={"www-authenticate": "Bearer"})
            if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
                await send({"type": "websocket.close", "code": 1008})
                return
            await response(scope, receive, send)  # on a WebSocket: the denial response
            return
        scope.setdefault("state", {})["api_key"] = key
        await self.app(scope, receive, send)


def api_key(request: HTTPConnection) -> ApiKey | None:
    key: Any = getattr(request.state, "api_key", None)
    return key if isinstance(key, ApiKey) else None


def principal(request: HTTPConnection) -> Principal:
    """The tenant of this request: its key's name and allow-list (anonymous with auth off)."""
    key = api_key(request)
    if key is None:
        return ANONYMOUS
    return Principal(key.name, None if key.models is None else frozenset(key.models))


def may_use(request: HTTPConnection, model: str) -> bool:
    return principal(request).may_use(model)


def check_model(request: HTTPConnection, model: str) -> None:
    """A model outside the key's allow-list looks exactly like a missing model (404)."""
    if not may_use(request, model):
        raise ModelNotFound(f"The model {model!r} does not exist.", param="model")
