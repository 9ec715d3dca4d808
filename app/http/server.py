"""The HTTP/1.1 connection layer: uvicorn's protocols (h11 or httptools) with the gateway's guards.

uvicorn closes idle keep-alive connections, but a connection that sends nothing, or sends its
request head one byte a second, is held forever: 500 such connections held 516 file
descriptors. Both :class:`GuardedH11Protocol` and :class:`GuardedHttpToolsProtocol` (chosen by
``[http] protocol``, :func:`protocol_class`) share one set of guards (:class:`_Guards`):

- every request head gets ``limits.header_timeout`` seconds to arrive (from the moment the
  connection opens, or the previous response ends), then the connection is closed. Bodies
  have their own deadline (``limits.body_timeout``, a 408 from :mod:`app.http.limits`);
- open connections are capped (:func:`connection_cap`): one over the cap gets an immediate 503
  (an OpenAI error body) and is closed;
- a request head is at most :data:`MAX_HEAD` bytes: a longer one is a 431 and a close (h11
  counts it itself; httptools has no limit, so its bytes are counted here), a malformed one a
  400, both with an OpenAI error body;
- ``TCP_NODELAY`` on every accepted connection;
- (httptools) a response's head is written with the first part of its body when that comes in
  the same turn of the event loop (:class:`_HeadWithBody`): one ``send`` syscall instead of two
  for a JSON answer, and for a stream whose first events are ready;
- a WebSocket upgrade hands the connection over with its head deadline disarmed (it would
  otherwise close the socket).

A client that leaves is seen by uvicorn's own ``connection_lost`` (``http.disconnect`` to the
app, which cancels the upstream request).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from typing import Any, Literal

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import GatewayConfig, load_config
from app.core.errors import error_body

MAX_HEAD = 64 * 1024  # bytes of one request head (request line + headers)


@functools.cache
def _settings() -> tuple[float, int]:
    # Read in each worker process from the same file + environment as the app itself.
    cfg = load_config()
    return cfg.limits.header_timeout, connection_cap(cfg)


def _response(status: str, message: str, type_: str, code: str, extra: bytes = b"") -> bytes:
    body = orjson.dumps(error_body(message, type_, code))
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\n%sconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (status.encode(), extra, len(body), body))


FULL = _response("503 Service Unavailable", "The gateway has too many open connections; retry later.",
                 "server_error", "too_many_connections", b"retry-after: 1\r\n")
BAD_HEAD = _response("400 Bad Request", "Invalid HTTP request received.", "invalid_request_error",
                     "invalid_http_request")
HEAD_TOO_LARGE = _response("431 Request Header Fields Too Large",
                           f"The request line and headers exceed {MAX_HEAD} bytes.",
                           "invalid_request_error", "request_header_too_large")


def connection_cap(cfg: GatewayConfig) -> int:
    """Open connections + tasks per worker: every admission slot and queue place, plus room for
    health checks, metrics and requests being refused."""
    lim = cfg.limits
    if lim.max_connections is not None:
        return lim.max_connections
    return (lim.max_inflight or cfg.upstream.max_connections) + lim.max_queue + 256


def _no_delay(transport: asyncio.Transport) -> None:
    """Small writes go out at once. asyncio sets TCP_NODELAY only on sockets it knows are TCP;
    with ``--workers N`` uvicorn binds the listening socket itself with protocol 0, and every
    response then waited for the client's delayed ACK (+40 ms per request, measured)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Guards(asyncio.Protocol):
    """The guards, ahead of a uvicorn HTTP protocol in the method order (``class
    X(_Guards, UvicornProtocol)``); it uses the attributes both uvicorn protocols have."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]
    cycle: Any  # the protocol's RequestResponseCycle of the latest request, or None
    _head_timer: asyncio.TimerHandle | None = None
    _head_too_large = False

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(_settings()[0], self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or bool(self.cycle.response_complete)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        _no_delay(transport)
        super().connection_made(transport)
        if len(self.connections) > _settings()[1]:  # over the cap: refuse before reading anything
            transport.write(FULL)
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, *event: Any) -> None:
        self._disarm()  # the connection is the WebSocket's now: no request head will follow
        super().handle_websocket_upgrade(*event)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self._waiting_for_head() and not self.transport.is_closing():
            self._arm()  # the next head on this keep-alive connection gets the same deadline

    def send_400_response(self, msg: str) -> None:
        """A head the parser refused (uvicorn's own answer is text/plain): the OpenAI error body,
        431 for a head over :data:`MAX_HEAD`, and the connection closed. In the middle of a
        response (a pipelined head, a malformed chunked body) only the close."""
        self._disarm()
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(HEAD_TOO_LARGE if self._head_too_large else BAD_HEAD)
        self.transport.close()


class GuardedH11Protocol(_Guards, H11Protocol):
    """uvicorn's h11 protocol (pure Python) with the guards. h11 refuses an incomplete head
    over ``max_incomplete_event_size`` (``h11_max_incomplete_event_size=MAX_HEAD``) but takes a
    longer one that arrives in one read: a complete head's url + headers are measured here."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._h11_next_event = self.conn.next_event
        self.conn.next_event = self._next_event  # type: ignore[method-assign]
        super().connection_made(transport)

    def _next_event(self) -> Any:
        event = self._h11_next_event()
        if type(event) is h11.Request and \
                len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers) > MAX_HEAD:
            self._head_too_large = True
            raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
        return event

    def handle_events(self) -> None:
        super().handle_events()
        if not self._waiting_for_head():
            self._disarm()  # a head arrived: the request is the app's (and the body deadline's)

    def send_400_response(self, msg: str) -> None:
        # h11's own refusal of an incomplete head over its limit ("Receive buffer too long")
        self._head_too_large |= len(self.conn.trailing_data[0]) > MAX_HEAD
        super().send_400_response(msg)


class _HeadWithBody:
    """A request cycle's view of its connection (what uvicorn's cycle uses of a transport:
    ``write``, ``close``, ``is_closing``): its first write, the response head, is held until the
    next write joins it or, at the latest, the end of this turn of the event loop.  Each write
    is a syscall and, on loopback, a wake-up of the reader (~65 µs of CPU a write at c=32 on this
    2-core VM, 15 % of a streamed request's CPU before): most responses write their head and
    first body in one turn.  Nothing is held past the turn, so a stream whose first event is not
    ready yet still sends its head at once."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = b""  # b"": nothing written yet; None: no more holding

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._transport.write(data)
        elif not held:
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            self._held = None
            self._transport.write(held + data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class GuardedHttpToolsProtocol(_Guards, HttpToolsProtocol):
    """uvicorn's httptools protocol (llhttp, in C) with the guards. llhttp has no limit on a
    head's size (it buffers a header value of any length), so the bytes that arrive while a head
    is incomplete are counted here, and a head's url + headers are measured once it is complete."""

    _in_head = True  # the bytes that arrive now belong to a request head
    _head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > MAX_HEAD and not self.transport.is_closing():
            self._head_too_large = True
            self.send_400_response("request head too large")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm()  # a head arrived: the request is the app's (and the body deadline's)
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD:  # its last read completed it: refused before a cycle starts
            self._head_too_large = True
            raise ValueError("request head too large")  # httptools: HttpParserCallbackError → 400
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a new request's cycle (not an upgrade): its task runs later
            self.cycle.transport = _HeadWithBody(self.transport, self.loop)

    def on_message_complete(self) -> None:
        self._in_head = True  # what follows is the next request's head
        super().on_message_complete()


Protocol = Literal["h11", "httptools"]
PROTOCOLS: dict[str, type[_Guards]] = {"h11": GuardedH11Protocol, "httptools": GuardedHttpToolsProtocol}


def protocol_class(name: Protocol) -> type[_Guards]:
    """The guarded uvicorn protocol for ``[http] protocol``."""
    return PROTOCOLS[name]
