"""A small HTTP server on loopback in a thread (``http.server``), for fakes that replay a
recording or receive what the gateway sends: :func:`serving` yields its base URL.

:class:`Quiet` is a handler that logs nothing and answers with :meth:`Quiet.reply`;
:func:`static` makes one that answers ``GET`` from a table of paths."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = tuple[int, str, bytes]  # status, content-type, body


class Quiet(BaseHTTPRequestHandler):
    def reply(self, status: int, kind: str, body: bytes, **headers: str) -> None:
        """``status`` with ``body`` of type ``kind`` (its length given), and ``headers``."""
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def static(routes: dict[str, Route]) -> type[Quiet]:
    """A handler answering ``GET PATH`` with ``routes[PATH]``, else an empty 404."""

    class Static(Quiet):
        def do_GET(self) -> None:
            self.reply(*routes.get(self.path, (404, "text/plain", b"")))

    return Static


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
