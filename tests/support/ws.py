"""Open Responses WebSocket mode for tests: the gateway in a real uvicorn server (the
gateway's own HTTP protocol classes) on a loopback port, and one turn of the protocol read
and checked (order validator, the spec's event schemas, ``WebSocketErrorEvent``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from websockets.asyncio.client import ClientConnection

from app.config import GatewayConfig
from app.http.server import MAX_HEAD, Protocol, protocol_class
from app.http.ws_protocol import GracefulWebSocketProtocol
from app.main import create_app
from tests.support.gateway import MODEL, config
from tests.support.openresponses import _validate, check_stream
from tests.support.process import free_port

Json = dict[str, Any]


@asynccontextmanager
async def served(upstream: httpx.AsyncBaseTransport, cfg: GatewayConfig | None = None,
                 protocol: Protocol | None = None) -> AsyncIterator[str]:
    """The gateway in a real uvicorn server on a free loopback port (``protocol``: the HTTP
    protocol, default the config's ``[http] protocol``); yields its base URL."""
    cfg = cfg or config()
    app = create_app(cfg, transport=upstream)
    port = free_port()
    http = protocol_class(protocol or cfg.http.protocol)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=http,
                                           h11_max_incomplete_event_size=MAX_HEAD,
                                           ws=GracefulWebSocketProtocol, lifespan="on",
                                           log_level="warning"))
    task = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", "model": MODEL} | body)


async def turn(ws: ClientConnection) -> tuple[list[Json], Json | None]:
    """One turn's streamed events (checked) up to its terminal, or ([], the error event)."""
    events: list[Json] = []
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if event["type"] == "error" and "sequence_number" not in event:
            assert not events, "an error event in the middle of a response"
            _validate("WebSocketErrorEvent", event)
            return [], event
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            check_stream(events)
            return events, None
