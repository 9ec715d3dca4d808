"""The HTTP/1.1 connection layer: uvicorn's h11 protocol with a deadline for request heads.

uvicorn closes idle keep-alive connections, but a connection that sends nothing, or sends its
request head one byte a second, is held forever: 500 such connections held 516 file
descriptors. :class:`GuardedH11Protocol` gives every request head ``limits.header_timeout``
seconds to arrive (from the moment the connection opens, or the previous response ends), then
closes the connection. Bodies have their own deadline (``limits.body_timeout``, a 408 from
:mod:`app.http.limits`). Open connections are capped (:func:`connection_cap`): one over the cap
gets an immediate 503 (an OpenAI error body) and is closed. A WebSocket upgrade hands the
connection over with its head deadline disarmed (it would otherwise close the socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from typing import Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.config import GatewayConfig, load_config
from app.core.errors import error_body


@functools.cache
def _settings() -> tuple[float, int]:
    # Read in each worker process from the same file + environment as the app itself.
    cfg = load_config()
    return cfg.limits.header_timeout, connection_cap(cfg)


_FULL_BODY = orjson.dumps(error_body(
    "The gateway has too many open connections; retry later.", "server_error", "too_many_connections"))
FULL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_FULL_BODY), _FULL_BODY))


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


class GuardedH11Protocol(H11Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(_settings()[0], self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
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

    def handle_events(self) -> None:
        super().handle_events()
        if not self._waiting_for_head():
            self._disarm()  # a head arrived: the request is the app's (and the body deadline's)

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._disarm()  # the connection is the WebSocket's now: no request head will follow
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next head on this keep-alive connection gets the same deadline
