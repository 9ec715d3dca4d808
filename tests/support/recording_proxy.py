"""A transparent TCP proxy on loopback that keeps a copy of what clients send: put it between
a real client (Claude Code) and the gateway to see the HTTP requests the gateway received,
byte for byte, while every answer (SSE streams included) passes through untouched (the
splice of :mod:`tests.support.rr_proxy`, a :class:`~tests.support.rr_proxy.Tap` per connection).

:func:`recording_proxy` runs it in a thread of its own and yields a :class:`Recording`; its
:meth:`Recording.requests` parses the bytes each connection sent into HTTP/1.1 requests
(``Content-Length`` or chunked bodies, ``gzip`` request bodies opened).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.rr_proxy import Tap, in_a_thread, splice


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _chunked(data: bytes, at: int) -> tuple[bytes, int]:
    body = bytearray()
    while True:
        end = data.index(b"\r\n", at)
        size = int(data[at:end].split(b";", 1)[0], 16)
        at = end + 2
        if size == 0:
            return bytes(body), data.index(b"\r\n\r\n", at - 2) + 4
        body += data[at:at + size]
        at += size + 2


def parse_requests(data: bytes) -> list[RecordedRequest]:
    """The complete HTTP/1.1 requests in ``data`` (one connection's bytes, in order)."""
    out: list[RecordedRequest] = []
    at = 0
    while (head_end := data.find(b"\r\n\r\n", at)) >= 0:
        lines = data[at:head_end].decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        start = head_end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            try:
                body, at = _chunked(data, start)
            except ValueError:  # incomplete
                return out
        else:
            length = int(headers.get("content-length", "0"))
            if len(data) < start + length:
                return out
            body, at = data[start:start + length], start + length
        if headers.get("content-encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        out.append(RecordedRequest(method, path, headers, body))
    return out


class _Copy(Tap):
    def __init__(self, lock: threading.Lock) -> None:
        self.sent_bytes = bytearray()
        self._lock = lock

    async def sent(self, data: bytes) -> None:
        with self._lock:
            self.sent_bytes.extend(data)


@dataclass
class Recording:
    url: str
    _connections: list[bytearray] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def connection(self) -> Tap:
        """A new connection's copy: the tap that appends what its client sends."""
        copy = _Copy(self._lock)
        with self._lock:
            self._connections.append(copy.sent_bytes)
        return copy

    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            sent = [bytes(c) for c in self._connections]
        return [r for data in sent for r in parse_requests(data)]


@contextlib.contextmanager
def recording_proxy(upstream: str) -> Iterator[Recording]:
    """Listen on a loopback port and forward every connection to ``upstream``
    (``http://127.0.0.1:PORT``); yields the recording, whose ``url`` is the proxy's."""
    host, port = upstream.removeprefix("http://").rstrip("/").rsplit(":", 1)
    recording = Recording("")

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await splice(client_r, client_w, host, int(port), recording.connection)

    with in_a_thread(handle, "the recording proxy") as url:
        recording.url = url
        yield recording
