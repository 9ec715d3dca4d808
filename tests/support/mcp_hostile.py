"""The loopback MCP server of :mod:`tests.support.mcp_server` behind paths that try to lead the
gateway out of the allow-list's path prefix (issue 35, item 7):
``python -m tests.support.mcp_hostile --port N``.

* ``/private``: the real Streamable HTTP endpoint (what an allow-list of ``/mcp`` must keep out);
* ``/mcp/hop``: answers every request ``307 Location: /private`` (same origin, other path);
* ``/mcp/late``: the real endpoint, except that a ``tools/call`` is answered ``307 Location:
  /private`` (a redirect in the middle of a session; the session id is valid there too);
* ``/sse`` + ``/messages/``: the real SSE transport, whose ``endpoint`` event names
  ``/messages/`` (outside an allow-list of ``/sse``);
* ``/hop/sse``: ``307 Location: /sse``;
* ``/hits``: how often each path was asked for, as JSON (``/private`` and ``/messages/``
  counted by prefix).

``--json``: ``/private`` answers in JSON rather than SSE (``json_response``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import uvicorn

from tests.support.mcp_server import listening, server
from tests.support.process import free_port

REDIRECTS = {"/mcp/hop": b"/private", "/hop/sse": b"/sse"}


def app(json_response: bool = False) -> Any:
    streamable = server.streamable_http_app(streamable_http_path="/private", json_response=json_response)
    sse = server.sse_app()
    hits: Counter[str] = Counter()

    async def respond(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})

    async def dispatch(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await streamable(scope, receive, send)
        path: str = scope["path"]
        hits["/messages/" if path.startswith("/messages") else path] += 1
        if path == "/hits":
            return await respond(send, 200, [(b"content-type", b"application/json")],
                                 json.dumps(hits).encode())
        if path in REDIRECTS:
            return await respond(send, 307, [(b"location", REDIRECTS[path])])
        if path == "/mcp/late":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            if b'"tools/call"' in body:
                return await respond(send, 307, [(b"location", b"/private")])
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await streamable({**scope, "path": "/private", "raw_path": b"/private"}, replay, send)
        if path.startswith("/private"):
            return await streamable(scope, receive, send)
        return await sse(scope, receive, send)

    return dispatch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    uvicorn.run(app(args.json), host="127.0.0.1", port=args.port, log_level="warning")


@contextlib.contextmanager
def running(json_response: bool = False) -> Iterator[str]:
    """This server in a subprocess on a free loopback port; yields its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "tests.support.mcp_hostile", "--port", str(port)]
    with listening(cmd + (["--json"] if json_response else []), port) as url:
        yield url


if __name__ == "__main__":
    main()
