"""What both dialects share: prepared replies, per-dialect counters, HTTP/1.1 framing.

A :class:`Dialect` builds a :class:`Reply` once per distinct request (method, path, body) and
caches it; the server fills in the per-request holes (ids, ``created``, ``date``) on the way out.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import orjson

from benchmarks.overhead.fake.script import Script, Settings

CACHE_LIMIT = 1024

# Same-length placeholders, replaced per request (chunk sizes stay valid).
ID_HOLE = b"chatcmpl-" + b"@" * 16
CREATED_HOLE = 1000000007
CREATED_BYTES = b'"created":1000000007'
DATE_HOLE = b"@" * 29  # "Sun, 22 Nov 2026 10:58:53 GMT"

CLOSE = b"Connection: close\r\n"


@dataclass
class Reply:
    """A prepared response: ``head`` (status line and headers, without the blank line) and the
    framed body pieces; ``lead`` pieces go out with the first token, ``paced`` pieces are
    tokens (``gap`` apart), the rest go out with the last token."""

    status: int
    head: bytes
    pieces: list[bytes]
    lead: int = 0
    paced: int = 0
    delay: float = 0.0  # a non-stream answer: seconds until it is complete (TTFT + gaps)
    dynamic: bool = False  # contains ID_HOLE / CREATED_HOLE / DATE_HOLE
    close: bool = False  # the server closes the connection after it (errors)
    whole: bytes = b""

    def __post_init__(self) -> None:
        self.whole = b"".join(self.pieces)


@dataclass
class Stats:
    connections: int = 0
    open: int = 0
    max_open: int = 0
    requests: int = 0
    built: int = 0  # answers built (requests whose exact bytes were not seen before)
    paths: dict[bytes, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"connections": self.connections, "open": self.open, "max_open": self.max_open,
                "requests": self.requests, "built": self.built,
                "paths": {k.decode("latin-1"): v for k, v in self.paths.items()}}


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj: Any) -> bytes:
    return chunk(b"data: " + orjson.dumps(obj) + b"\n\n")


def status_line(status: int) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
              500: b"Internal Server Error"}.get(status, b"Unknown")
    return b"HTTP/1.1 %d %s\r\n" % (status, reason)


class Dialect(ABC):
    """One server personality: routes a request to a (cached) :class:`Reply`."""

    def __init__(self, script: Script, settings: Settings) -> None:
        self.script = script
        self.settings = settings
        self.stats = Stats()
        self._cache: dict[tuple[bytes, bytes, bytes], Reply] = {}

    def reply(self, method: bytes, path: bytes, body: bytes) -> Reply:
        key = (method, path, body)
        cached = self._cache.get(key)
        if cached is None:
            self.stats.built += 1
            cached = self.build(method.decode(), path.decode("latin-1"), body)
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    @abstractmethod
    def build(self, method: str, path: str, body: bytes) -> Reply:
        """The whole answer to one request (status, headers, body events)."""

    def keep_alive_line(self) -> bytes:
        """The header a kept-alive response carries (replaced by ``Connection: close``)."""
        return b""
