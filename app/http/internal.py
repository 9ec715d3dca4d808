"""Calling the gateway's own routes in process, as one of its API keys (the Batch API's lines).

:func:`call` runs one ``POST`` through the whole ASGI application — middleware included:
authentication, limits, budgets, usage, metrics — exactly as if a client had sent it, and
returns the status and body.  The caller is named by the SHA-256 digest of its key, in a
top-level scope entry (:data:`KEY_DIGEST`) that only code in this process can set (a server
builds scopes from the wire and never adds it), which :class:`app.http.auth.AuthMiddleware`
uses instead of a header; a key revoked or expired since then is refused like any other.
The request's client never disconnects; cancelling :func:`call` cancels the request (and so
its upstream generation), as a client that goes away would.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Message

KEY_DIGEST = "ocm.key_digest"
BATCH = "ocm.batch"  # marks the request as a batch line (usage, metrics)


async def call(app: ASGIApp, path: str, body: bytes, *, key_digest: str | None,
               batch: str | None = None) -> tuple[int, bytes]:
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 0),
        "server": ("gateway", 0),
        "headers": [(b"host", b"gateway"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        KEY_DIGEST: key_digest, BATCH: batch}
    delivered = False
    status, chunks = 500, list[bytes]()

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays until the call is cancelled
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))

    await app(scope, receive, send)
    return status, b"".join(chunks)
