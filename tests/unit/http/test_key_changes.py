"""The key cache (app/http/keys.py) and how a change made through /admin/keys reaches the other
processes: the machine's signal hub (real, on a Unix socket in this process) and Redis (a real
``redis-server``), each with two resolvers standing for two workers."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.engine import signal_hub
from app.http.keys import KeyResolver, share_changes
from tests.support.redis_server import redis_server
from tests.support.signals_worker import SignalsWorker

pytestmark = pytest.mark.timeout(60)
DIGEST = "d" * 64


def record(revoked: bool = False) -> dict[str, Any]:
    return {"id": "key_1", "sha256": DIGEST, "revoked_at": 1 if revoked else None}


class Store:
    """An account store holding one key record; ``gate`` holds reads until set."""

    def __init__(self) -> None:
        self.record = record()
        self.reads = 0
        self.gate: asyncio.Event | None = None

    async def key_by_hash(self, digest: str) -> dict[str, Any] | None:
        self.reads += 1
        seen = dict(self.record)  # what the store held when the read began
        if self.gate is not None:
            await self.gate.wait()
        return seen if digest == DIGEST else None


def resolver(store: Store, ttl: float = 60.0) -> KeyResolver:
    return KeyResolver(store, ttl)  # type: ignore[arg-type]


async def test_a_key_is_read_once_and_cached() -> None:
    store = Store()
    keys = resolver(store)
    assert (await keys.find(DIGEST)) is not None
    assert (await keys.find(DIGEST)) is not None and store.reads == 1


async def test_a_change_forgets_the_key_and_a_read_in_flight_is_not_cached() -> None:
    """A read that began before the revocation answers its request with what it read, but must
    not leave the old record in the cache for key_cache_seconds."""
    store = Store()
    keys = resolver(store)
    store.gate = asyncio.Event()
    reading = asyncio.ensure_future(keys.find(DIGEST))
    await asyncio.sleep(0.01)
    store.record = record(revoked=True)
    await keys.changed([DIGEST])  # no channel: this process only
    store.gate.set()
    assert (await reading) is not None  # it began before the change
    assert (await keys.find(DIGEST)) is None  # read again: revoked
    assert store.reads == 2


async def test_forget_everything() -> None:
    store = Store()
    keys = resolver(store)
    await keys.find(DIGEST)
    keys.forget(None)
    await keys.find(DIGEST)
    assert store.reads == 2


async def test_a_channel_that_fails_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    keys = resolver(Store())

    async def down(digests: list[str]) -> None:
        raise ConnectionResetError("gone")

    keys.publish = down
    with caplog.at_level(logging.WARNING, "ocm_gateway"):
        await keys.changed([DIGEST])
    assert "key_cache_seconds" in caplog.text and DIGEST not in caplog.text


class Worker(SignalsWorker):
    def __init__(self, path: str, store: Store) -> None:
        super().__init__(path)
        self.keys = resolver(store)
        assert share_changes(self.keys, self.signals, None) is None


async def test_through_the_hub_the_other_worker_forgets_before_changed_returns(tmp_path: Path) -> None:
    path = str(tmp_path / "signals.sock")
    server, _ = await signal_hub.listen(path)
    store = Store()
    a, b = await Worker(path, store).start(), await Worker(path, store).start()
    try:
        await asyncio.sleep(0.05)  # both linked: their link hooks ran
        assert (await a.keys.find(DIGEST)) is not None and (await b.keys.find(DIGEST)) is not None
        store.record = record(revoked=True)
        await a.keys.changed([DIGEST])
        assert DIGEST not in b.keys._cache  # already, not after key_cache_seconds
        assert (await b.keys.find(DIGEST)) is None
    finally:
        await a.stop()
        await b.stop()
        server.close()


async def test_through_redis_every_process_forgets() -> None:
    with redis_server() as server:
        store = Store()
        clients = [aioredis.from_url(server.url) for _ in range(2)]
        a, b = resolver(store), resolver(store)
        tasks = [share_changes(keys, None, client) for keys, client in zip((a, b), clients, strict=True)]
        try:
            assert all(task is not None for task in tasks)
            await asyncio.sleep(0.3)  # subscribed
            assert (await b.find(DIGEST)) is not None
            store.record = record(revoked=True)
            await a.changed([DIGEST])
            for _ in range(200):
                if DIGEST not in b._cache:
                    break
                await asyncio.sleep(0.005)
            assert (await b.find(DIGEST)) is None
        finally:
            for task in tasks:
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in tasks if t is not None), return_exceptions=True)
            for client in clients:
                await client.aclose()
