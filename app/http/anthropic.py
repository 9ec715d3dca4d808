"""Anthropic's error envelope on the Messages API's paths, as pure ASGI middleware.

Every error the gateway answers on ``/v1/messages...`` — a route's :class:`GatewayError`, a
validation error, the auth middleware's 401, the limits' 413 / 429, an unknown URL — is built
once in the OpenAI shape (``{"error": {...}}``) and rewritten here, in one place, to
Anthropic's ``{"type": "error", "error": {"type", "message"}}`` with Anthropic's status
(:func:`app.core.errors.anthropic_error`).  Every response on those paths carries a
``request-id`` header (the request's ``x-request-id``).  Only error answers (small JSON
bodies) are held; a stream passes through untouched (its errors are the encoder's).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import anthropic_error

PREFIX = "/v1/messages"


def is_messages_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _rewrite(body: bytes, status: int) -> tuple[int, bytes]:
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    new_status, envelope = anthropic_error(status, str(message) if message else f"HTTP {status}")
    return new_status, orjson.dumps(envelope)


class AnthropicErrors:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_messages_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        held: list[bytes] = []

        async def wrapped(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                request_id = scope.get("state", {}).get("request_id", "")
                headers = [*message.get("headers", []), (b"request-id", request_id.encode("latin-1"))]
                message = {**message, "headers": headers}
                if message["status"] >= 400:
                    start = message  # held until the body is complete
                    return
            elif message["type"] == "http.response.body" and start is not None:
                held.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                status, body = _rewrite(b"".join(held), start["status"])
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "status": status, "headers": headers})
                message = {"type": "http.response.body", "body": body}
            await send(message)

        await self.app(scope, receive, wrapped)
