"""The HTTP/1.1 connection layer (``app.http.server``) on real sockets."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn
from uvicorn.server import ServerState

from app.http.server import GuardedH11Protocol

pytestmark = pytest.mark.asyncio


async def _app(scope: object, receive: object, send: object) -> None:  # never called
    raise AssertionError


@pytest.mark.parametrize("proto", [0, socket.IPPROTO_TCP])
async def test_accepted_connections_send_small_writes_at_once(proto: int) -> None:
    """``--workers N``: uvicorn binds the listening socket itself with protocol 0, and asyncio
    then leaves Nagle on for accepted connections; the gateway turns it off on every one."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    config = uvicorn.Config(_app, http=GuardedH11Protocol, log_level="error")
    config.load()
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: GuardedH11Protocol(config=config, server_state=state, app_state={}), sock=listener)
    try:
        _, writer = await asyncio.open_connection(*listener.getsockname())
        for _ in range(100):
            if state.connections:
                break
            await asyncio.sleep(0.01)
        (protocol,) = state.connections
        accepted = protocol.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        writer.close()
    finally:
        server.close()
