"""API-key authentication as pure ASGI middleware (no BaseHTTPMiddleware).

Keys are configured as SHA-256 digests; a request's ``Authorization: Bearer KEY`` is
hashed and compared in constant time.  Health, readiness, metrics and the API docs stay open.  The
matched key is put in ``scope["state"]["api_key"]`` so routes can apply its model
allow-list (:func:`check_model`) and scope what they store to its tenant (:func:`principal`).
WebSocket upgrades (``GET /v1/responses``) are checked the same way: a bad key gets the same
401 instead of the upgrade (or, on a server without the denial-response extension, the
handshake is closed with 1008, which the server answers with 403).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from app.config import ApiKey
from app.core.access import ANONYMOUS, Principal
from app.core.errors import ModelNotFound, error_body
from app.http.responses import JSONResponse

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics", "/ping", "/docs", "/openapi.json"})


class AuthMiddleware:
    def __init__(self, app: ASGIApp, keys: list[ApiKey]) -> None:
        self.app = app
        self.keys = keys

    def _match(self, scope: Scope) -> ApiKey | None:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() != "bearer" or not token.strip():
                    return None
                digest = hashlib.sha256(token.strip().encode()).hexdigest()
                for key in self.keys:
                    if hmac.compare_digest(digest, key.sha256):
                        return key
                return None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.keys or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        key = self._match(scope)
        if key is None:
            body = error_body("Missing or invalid API key. Send 'Authorization: Bearer <key>'.",
                                 "invalid_request_error", "invalid_api_key")
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
