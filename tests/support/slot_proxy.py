"""A loopback HTTP/1.1 proxy that counts the generations a llama.cpp server is asked for.

:func:`slot_proxy` forwards every connection to ``upstream`` (which :meth:`SlotProxy.retarget`
may change: a restarted server on another port) and follows both directions of each
connection: a ``POST /completion`` counts as in flight from the moment its request head is
forwarded until the last byte of its response (chunked or ``Content-Length``) is forwarded
back, or the connection closes.  ``peak`` is the most in flight at one instant, ``sent`` how
many were forwarded in all.  ``hold`` seconds are waited before forwarding each completion's
response, so that concurrent generations of a tiny model overlap for certain.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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


async def _connection(proxy: SlotProxy, client_r: asyncio.StreamReader,
                      client_w: asyncio.StreamWriter) -> None:
    try:
        up_r, up_w = await asyncio.open_connection(*proxy.upstream)
    except OSError:
        client_w.close()
        return
    paths: collections.deque[str] = collections.deque()  # requests forwarded, not yet answered
    open_completions = [0]

    async def requests() -> None:
        buf, body = bytearray(), None
        while data := await client_r.read(65536):
            up_w.write(data)
            buf += data
            while True:
                if body is None:
                    head = _head(buf)
                    if head is None:
                        break
                    path = head[0].split(" ")[1] if " " in head[0] else ""
                    paths.append(path)
                    if path == COMPLETION:
                        open_completions[0] += 1
                        proxy._started()
                    body = _Body(head[1])
                body.feed(buf)
                if not body.done:
                    break
                body = None
            await up_w.drain()
        up_w.close()  # the client left: so does the upstream connection (llama.cpp stops)

    async def responses() -> None:
        buf, body, path = bytearray(), None, ""
        while data := await up_r.read(65536):
            out = bytes(data)
            buf += data
            while True:
                if body is None:
                    head = _head(buf)
                    if head is None:
                        break
                    path = paths.popleft() if paths else ""
                    if path == COMPLETION and proxy.hold:
                        await asyncio.sleep(proxy.hold)
                    body = _Body(head[1])
                body.feed(buf)
                if not body.done:
                    break
                if path == COMPLETION:
                    client_w.write(out)  # the whole answer reaches the client before it counts
                    out = b""
                    open_completions[0] -= 1
                    proxy._ended()
                body = None
            client_w.write(out)
            await client_w.drain()
        client_w.close()

    try:
        await asyncio.gather(requests(), responses())
    except (ConnectionError, OSError, ValueError):
        pass
    finally:
        for _ in range(open_completions[0]):
            proxy._ended()
        for writer in (client_w, up_w):
            with contextlib.suppress(Exception):
                writer.close()


@contextlib.contextmanager
def slot_proxy(upstream: str, hold: float = 0.0) -> Iterator[SlotProxy]:
    """Run the proxy in a thread of its own; yields it (``url`` is the proxy's base URL)."""
    proxy = SlotProxy(hold=hold)
    proxy.retarget(upstream)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _connection(proxy, r, w), "127.0.0.1", 0)
        state["server"] = server
        proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        started.set()
        async with server:
            with contextlib.suppress(asyncio.CancelledError):
                await server.serve_forever()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the slot proxy did not start")
    try:
        yield proxy
    finally:
        loop.call_soon_threadsafe(state["server"].close)
        thread.join(10)
