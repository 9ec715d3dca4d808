"""``[limits] max_websockets`` counted once for the workers of a machine: the counter service
(a real ``python -m app.http.machine_counters`` process) and two :class:`MachineCounters`
standing for two workers (app/http/machine_counters.py, ``open_socket`` / ``close_socket``);
and the middleware's upgrade answered 503 when the service is away."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Message

from app.config import LimitSettings
from app.http.counters import Budget
from app.http.limits import LimitsMiddleware
from app.http.machine_counters import MachineCounters
from tests.unit.http.test_machine_counters import Service, service_at

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with service_at(tmp_path) as running:
        yield running


async def test_one_cap_for_both_workers_freed_on_close(service: Service) -> None:
    a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
    held = await a.open_socket("key:k", 1)
    assert held is not None
    assert await b.open_socket("key:k", 1) is None  # A's socket is the key's one
    assert await b.open_socket("key:other", 1) is not None  # per key
    # a socket's place is not a generation slot of the same key
    assert await b.admit("key:k", Budget(None, None, 1), generation=True, lease="gen") is None
    a.close_socket(held)
    for _ in range(100):
        place = await b.open_socket("key:k", 1)
        if place is not None:
            break
        await asyncio.sleep(0.01)
    assert place is not None
    await a.aclose()
    await b.aclose()


async def test_a_killed_workers_sockets_are_freed(service: Service) -> None:
    a, b = MachineCounters(str(service.path)), MachineCounters(str(service.path))
    assert await a.open_socket("key:k", 2) is not None
    assert await a.open_socket("key:k", 2) is not None
    assert await b.open_socket("key:k", 2) is None
    assert a._conn is not None and a._conn.transport is not None
    a._held.clear()  # a dead worker does not come back for them
    a._conn.transport.abort()  # its connection closes, as a killed worker's does
    for _ in range(100):
        if await b.open_socket("key:k", 2) is not None:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the killed worker's places were not freed")
    await a.aclose()
    await b.aclose()


async def test_an_open_socket_outlives_the_lease(tmp_path: Path) -> None:
    """Slots expire after ``lease_seconds`` (a dead replica's); an open WebSocket's place is
    refreshed while it is open, so a long session keeps it (without the refresh it would be
    free after 0.3 s here)."""
    with service_at(tmp_path, lease_seconds=0.3) as service:
        a = MachineCounters(str(service.path), lease_seconds=0.3)
        b = MachineCounters(str(service.path), lease_seconds=0.3)
        held = await a.open_socket("key:long", 1)
        assert held is not None
        for _ in range(6):
            await asyncio.sleep(0.2)
            assert await b.open_socket("key:long", 1) is None
        a.close_socket(held)
        await asyncio.sleep(0.05)
        assert await b.open_socket("key:long", 1) is not None
        await a.aclose()
        await b.aclose()


async def test_the_service_away_refuses_the_upgrade_with_503(tmp_path: Path) -> None:
    sent: list[Message] = []
    reached: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    counters = MachineCounters(str(tmp_path / "none.sock"), timeout=0.2)
    middleware = LimitsMiddleware(app, LimitSettings(), counters=counters)
    await middleware({"type": "websocket", "path": "/v1/responses", "client": ("127.0.0.1", 1),
                      "headers": []}, receive, send)
    assert not reached
    assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
    assert b"limits_unavailable" in sent[1]["body"]
