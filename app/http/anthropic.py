"""Anthropic's error envelope on the Messages API's paths, as pure ASGI middleware, and the
model list in Anthropic's shape.

Every error the gateway answers on ``/v1/messages...`` (and on ``/v1/models...`` when the
request carries ``anthropic-version``: Anthropic's SDKs list models there) — a route's
:class:`GatewayError`, a validation error, the auth middleware's 401, the limits' 413 / 429, an
unknown URL — is built once in the OpenAI shape (``{"error": {...}}``) and rewritten here, in
one place, to Anthropic's ``{"type": "error", "error": {"type", "message"}}`` with Anthropic's
status (:func:`app.core.errors.anthropic_error`).  Every response on those paths carries a
``request-id`` header (the request's ``x-request-id``).  Only error answers (small JSON
bodies) are held; a stream passes through untouched (its errors are the encoder's).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import InvalidRequest, anthropic_error

PREFIX = "/v1/messages"
MODELS = "/v1/models"
MAX_PAGE = 1000


def is_messages_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _anthropic_scope(scope: Scope) -> bool:
    if is_messages_path(scope["path"]):
        return True
    if scope["path"] != MODELS and not scope["path"].startswith(MODELS + "/"):
        return False
    return any(k == b"anthropic-version" for k, _ in scope.get("headers", ()))


def model_object(model_id: str, display_name: str, created: int) -> dict[str, Any]:
    """One entry of Anthropic's ``GET /v1/models``."""
    stamp = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "model", "id": model_id, "display_name": display_name, "created_at": stamp}


def model_page(models: Sequence[dict[str, Any]], *, limit: str | None, after_id: str | None,
               before_id: str | None) -> dict[str, Any]:
    """Anthropic's page of models: ``limit`` (1-1000, default 20) after ``after_id`` or before
    ``before_id`` (an id not in the list: an empty page)."""
    try:
        size = 20 if limit is None else int(limit)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_PAGE:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}.", param="limit")
    if after_id is not None and before_id is not None:
        raise InvalidRequest("Give after_id or before_id, not both.", param="before_id")
    ids = [m["id"] for m in models]
    if after_id is not None:
        start = ids.index(after_id) + 1 if after_id in ids else len(ids)
        page, more = models[start:start + size], start + size < len(models)
    elif before_id is not None:
        end = ids.index(before_id) if before_id in ids else 0
        page, more = models[max(0, end - size):end], end - size > 0
    else:
        page, more = models[:size], size < len(models)
    return {"data": list(page), "has_more": more, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None}


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
        if scope["type"] != "http" or not _anthropic_scope(scope):
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
