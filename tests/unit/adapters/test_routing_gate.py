"""A replica's gate in :func:`adapters.routing.failover`: the slot is taken before anything is
sent and given back after the upstream stream is closed; a failure is reported to the gate
(its bound may have changed) and the retry goes through the next replica's gate; the wait at a
gate does not count against ``first_byte_timeout``; a request refused or cancelled at the gate
never reaches the replica.  Also llama.cpp's slot count from ``/props``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapters.llamacpp import LlamaCppBackend
from adapters.routing import ReplicaPool, RetryPolicy, failover
from app.core.errors import InvalidRequest, Overloaded, UpstreamError

pytestmark = pytest.mark.timeout(30)


class FakeGate:
    def __init__(self, log: list[str], name: str, wait: float = 0.0,
                 refuse: bool = False) -> None:
        self.log, self.name, self.wait, self.refuse = log, name, wait, refuse

    async def acquire(self) -> None:
        self.log.append(f"acquire {self.name}")
        await asyncio.sleep(self.wait)
        if self.refuse:
            raise Overloaded("full", retry_after=1)
        self.log.append(f"granted {self.name}")

    def release(self, failed: bool = False) -> None:
        self.log.append(f"release {self.name}{' failed' if failed else ''}")


def _pool(log: list[str], n: int = 1, policy: RetryPolicy | None = None,
          **gate: Any) -> ReplicaPool:
    pool = ReplicaPool([f"http://r{i}" for i in range(n)], policy or RetryPolicy(backoff=0))
    for i, replica in enumerate(pool.replicas):
        replica.gate = FakeGate(log, f"r{i}", **gate)
    return pool


def _opener(log: list[str], fail: set[str] = frozenset(), error: Exception | None = None,  # type: ignore[assignment]
            delay: float = 0.0) -> Any:
    def open_stream(base: str) -> AsyncIterator[dict[str, Any]]:
        name = base.removeprefix("http://")

        async def events() -> AsyncIterator[dict[str, Any]]:
            log.append(f"send {name}")
            try:
                await asyncio.sleep(delay)
                if name in fail:
                    raise error or UpstreamError("refused")
                yield {"n": 1}
                yield {"n": 2}
            finally:
                log.append(f"close {name}")
        return events()
    return open_stream


async def _collect(pool: ReplicaPool, opener: Any) -> list[dict[str, Any]]:
    return [e async for e in failover(pool, opener)]


async def test_the_slot_is_taken_before_sending_and_given_back_after_closing() -> None:
    log: list[str] = []
    pool = _pool(log)
    assert await _collect(pool, _opener(log)) == [{"n": 1}, {"n": 2}]
    assert log == ["acquire r0", "granted r0", "send r0", "close r0", "release r0"]
    assert pool.replicas[0].outstanding == 0


async def test_a_failed_replica_is_reported_and_the_retry_passes_the_next_gate() -> None:
    log: list[str] = []
    pool = _pool(log, 2)
    assert await _collect(pool, _opener(log, fail={"r0"})) == [{"n": 1}, {"n": 2}]
    assert log == ["acquire r0", "granted r0", "send r0", "close r0", "release r0 failed",
                   "acquire r1", "granted r1", "send r1", "close r1", "release r1"]


async def test_a_client_error_is_not_a_replica_failure() -> None:
    log: list[str] = []
    pool = _pool(log)
    with pytest.raises(InvalidRequest):
        await _collect(pool, _opener(log, fail={"r0"}, error=InvalidRequest("too long")))
    assert log[-1] == "release r0"


async def test_the_wait_at_the_gate_does_not_use_the_first_byte_budget() -> None:
    log: list[str] = []
    pool = _pool(log, 2, policy=RetryPolicy(first_byte_timeout=0.45, backoff=0), wait=0.3)
    # 0.3 s at r0's gate, r0 fails after 0.1 s, 0.3 s at r1's gate: 0.7 s in all, of which
    # 0.2 s waiting for the replicas themselves
    assert await _collect(pool, _opener(log, fail={"r0"}, delay=0.1)) == [{"n": 1}, {"n": 2}]
    assert log[-1] == "release r1"


async def test_refused_at_the_gate_nothing_is_sent() -> None:
    log: list[str] = []
    pool = _pool(log, 2, refuse=True)
    with pytest.raises(Overloaded):
        await _collect(pool, _opener(log))
    assert log == ["acquire r0"] and pool.replicas[0].outstanding == 0


async def test_a_client_that_leaves_at_the_gate_never_reaches_the_replica() -> None:
    log: list[str] = []
    pool = _pool(log, wait=10)
    task = asyncio.create_task(_collect(pool, _opener(log)))
    await asyncio.sleep(0.05)
    assert pool.replicas[0].outstanding == 1  # waiting counts: the next request goes elsewhere
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["acquire r0"] and pool.replicas[0].outstanding == 0


@pytest.mark.parametrize(("status", "body", "slots"), [
    (200, b'{"total_slots": 4, "default_generation_settings": {"n_ctx": 1024}}', 4),
    (200, b'{"default_generation_settings": {}}', None),  # an older server
    (200, b'{"total_slots": 0}', None),
    (200, b'{"total_slots": true}', None),
    (200, b'{"total_slots": "4"}', None),
    (503, b'{"error": {"message": "Loading model"}}', None),
    (200, b'not json', None),
])
async def test_llamacpp_reads_total_slots_from_props(status: int, body: bytes, slots: int | None) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(status, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        backend = LlamaCppBackend(client, ["http://a:1", "http://b:2"])
        assert await backend.total_slots("http://b:2") == slots
    assert asked == ["http://b:2/props"]
