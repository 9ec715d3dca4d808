"""A loopback HTTP/1.1 proxy that counts the generations a llama.cpp server is asked for.

:func:`slot_proxy` forwards every connection to ``upstream`` (which :meth:`SlotProxy.retarget`
may change: a restarted server on another port) and follows both directions of each
connection: a ``POST /completion`` counts as in flight from the moment its request head is
forwarded until the last byte of its response (chunked or ``Content-Length``) is forwarded
back, or the connection closes.  ``peak`` is the most in flight at one instant, ``sent`` how
many were forwarded in all.  ``hold`` seconds are waited before forwarding each completion's
response, so that concurrent generations of a tiny model overlap for certain.  The proxy is
:mod:`tests.support.rr_proxy`'s splice, run in a thread of its own, with a tap per connection
that reads both directions message by message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support.rr_proxy import Tap, in_a_thread, splice

COMPLETION = "/completion"


@dataclass
class SlotProxy:
    url: str = ""
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    hold: float = 0.0
    inflight: int = 0
    peak: int = 0
    sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def retarget(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").rstrip("/").rsplit(":", 1)
        self.upstream = (host, int(port))

    def reset(self) -> None:
        with self._lock:
            self.peak, self.sent = self.inflight, 0

    def _started(self) -> None:
        with self._lock:
            self.inflight += 1
            self.sent += 1
            self.peak = max(self.peak, self.inflight)

    def _ended(self) -> None:
        with self._lock:
            self.inflight -= 1


def _head(buf: bytearray) -> tuple[str, dict[str, str]] | None:
    """Take one message head off ``buf``: (start line, lower-cased headers), or None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    del buf[:end + 4]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return lines[0], headers


class _Body:
    """How much of one message body is still to come (Content-Length or chunked)."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.left = 0 if self.chunked else int(headers.get("content-length", "0"))
        self.done = not self.chunked and self.left == 0
        self._last = False

    def feed(self, buf: bytearray) -> None:
        """Consume what of the body ``buf`` holds; ``done`` once it is complete."""
        while not self.done:
            if not self.chunked or self.left:
                take = min(self.left, len(buf))
                del buf[:take]
                self.left -= take
                if self.left:
                    return
                self.done = not self.chunked
                continue
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            if self._last:  # trailers end with an empty line
                del buf[:line_end + 2]
                self.done = line_end == 0
                continue
            size = int(bytes(buf[:line_end]).split(b";")[0] or b"0", 16)
            del buf[:line_end + 2]
            if size == 0:
                self._last = True
            else:
                self.left = size + 2  # the data and its CRLF


class _Messages:
    """One direction of a connection, message by message: :meth:`feed` takes the bytes as they
    pass and yields the start line of each message head it completes, and ``None`` at the end of
    each message's body."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._body: _Body | None = None

    def feed(self, data: bytes) -> Iterator[str | None]:
        self._buf += data
        while True:
            if self._body is None:
                head = _head(self._buf)
                if head is None:
                    return
                yield head[0]
                self._body = _Body(head[1])
            self._body.feed(self._buf)
            if not self._body.done:
                return
            self._body = None
            yield None


class _Counted(Tap):
    """One connection's completions, counted in flight from the request head to the end of the
    answer (held ``hold`` seconds first), or until the connection closes."""

    def __init__(self, proxy: SlotProxy) -> None:
        self.proxy = proxy
        self.requests, self.responses = _Messages(), _Messages()
        self.paths: collections.deque[str] = collections.deque()  # forwarded, not yet answered
        self.answering = ""  # the path of the request whose answer is passing
        self.open = 0

    async def sent(self, data: bytes) -> None:
        for start in self.requests.feed(data):
            if start is not None:
                path = start.split(" ")[1] if " " in start else ""
                self.paths.append(path)
                if path == COMPLETION:
                    self.open += 1
                    self.proxy._started()

    async def received(self, data: bytes) -> None:
        for start in self.responses.feed(data):
            if start is not None:
                self.answering = self.paths.popleft() if self.paths else ""
                if self.answering == COMPLETION and self.proxy.hold:
                    await asyncio.sleep(self.proxy.hold)
            elif self.answering == COMPLETION:  # its last piece is passed on next
                self.open -= 1
                self.proxy._ended()

    def closed(self) -> None:
        for _ in range(self.open):
            self.proxy._ended()
        self.open = 0


@contextlib.contextmanager
def slot_proxy(upstream: str, hold: float = 0.0) -> Iterator[SlotProxy]:
    """Run the proxy in a thread of its own; yields it (``url`` is the proxy's base URL)."""
    proxy = SlotProxy(hold=hold)
    proxy.retarget(upstream)

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await splice(client_r, client_w, *proxy.upstream, lambda: _Counted(proxy))

    with in_a_thread(handle, "the slot proxy") as url:
        proxy.url = url
        yield proxy
