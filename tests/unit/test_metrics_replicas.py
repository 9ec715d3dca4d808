"""/metrics shows the replica queues (app/metrics.py ReplicaQueues): per model and replica URL the
generations in flight to a bounded replica, the requests waiting for one of its slots, its bound,
and the requests that left while waiting or that its queue refused; read from the replicas when
scraped.  Driven through adapters.routing.failover with a real ReplicaGate."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from adapters.routing import ReplicaPool, failover
from app.core.errors import Overloaded
from app.engine.admission import ReplicaGate
from app.metrics import Metrics
from tests.support.gateway import MODEL, config, gateway

URL = "http://r1:8080"


@dataclass
class Backend:
    pool: ReplicaPool


@dataclass
class Route:
    backend: Backend


def _pool(gate: ReplicaGate) -> ReplicaPool:
    pool = ReplicaPool([URL])
    pool.replicas[0].gate = gate
    return pool


def _samples(metrics: Metrics) -> dict[str, float]:
    """``name{labels}`` → value, for the replica metrics."""
    text = generate_latest(metrics.registry).decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^(ocm_replica_\w+\{[^}]*\}) (\S+)$", text, re.M)}


def _key(name: str, model: str) -> str:
    return f'{name}{{model="{model}",replica="{URL}"}}'


class Upstream:
    """``open_stream`` for failover: one event, then held open until ``done`` is set."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    def __call__(self, base: str) -> AsyncIterator[dict[str, Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        yield {"n": 0}
        await self.done.wait()


async def _request(pool: ReplicaPool, upstream: Upstream, seen: asyncio.Event | None = None) -> None:
    async for _ in failover(pool, upstream):
        if seen is not None:
            seen.set()


async def test_in_flight_waiting_bound_gave_up_and_refused_per_model() -> None:
    gate = ReplicaGate(URL, fixed=1, read_slots=None, margin=0, max_queue=2, queue_timeout=30)
    a, b = _pool(gate), _pool(gate)  # two models naming one replica: one gate, counted apart
    metrics = Metrics()
    metrics.watch_replicas({"alpha": Route(Backend(a)), "beta": Route(Backend(b))})
    upstream = Upstream()
    started = asyncio.Event()
    first = asyncio.create_task(_request(a, upstream, started))
    await started.wait()  # alpha holds the only slot
    second = asyncio.create_task(_request(a, upstream))
    third = asyncio.create_task(_request(b, upstream))
    await asyncio.sleep(0.02)
    with pytest.raises(Overloaded):  # two already waiting: the queue is full
        await _request(b, upstream)
    s = _samples(metrics)
    assert s[_key("ocm_replica_inflight", "alpha")] == 1 and s[_key("ocm_replica_waiting", "alpha")] == 1
    assert s[_key("ocm_replica_inflight", "beta")] == 0 and s[_key("ocm_replica_waiting", "beta")] == 1
    assert s[_key("ocm_replica_bound", "alpha")] == s[_key("ocm_replica_bound", "beta")] == 1
    assert s[_key("ocm_replica_refused_total", "beta")] == 1
    assert s[_key("ocm_replica_refused_total", "alpha")] == 0

    third.cancel()  # beta's client leaves while waiting
    await asyncio.gather(third, return_exceptions=True)
    s = _samples(metrics)
    assert s[_key("ocm_replica_gave_up_total", "beta")] == 1 and s[_key("ocm_replica_waiting", "beta")] == 0
    assert s[_key("ocm_replica_gave_up_total", "alpha")] == 0

    upstream.done.set()  # the first ends, the second gets the slot and ends too
    await asyncio.gather(first, second)
    s = _samples(metrics)
    assert s[_key("ocm_replica_inflight", "alpha")] == s[_key("ocm_replica_waiting", "alpha")] == 0
    assert gate.queue.inflight == 0


async def test_an_unknown_bound_is_absent_and_unbounded_replicas_are_not_shown() -> None:
    gate = ReplicaGate(URL, fixed=None, read_slots=None, margin=0, max_queue=2, queue_timeout=1)
    plain = ReplicaPool(["http://r2:8080"])  # no gate: nothing queues in front of it
    metrics = Metrics()
    metrics.watch_replicas({"alpha": Route(Backend(_pool(gate))), "plain": Route(Backend(plain)),
                            "nopool": object()})
    s = _samples(metrics)
    assert s == {_key("ocm_replica_inflight", "alpha"): 0, _key("ocm_replica_waiting", "alpha"): 0,
                 _key("ocm_replica_gave_up_total", "alpha"): 0, _key("ocm_replica_refused_total", "alpha"): 0}


async def test_the_gateway_shows_a_configured_bound() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404)

    async with gateway(httpx.MockTransport(handler), config(max_inflight=3)) as client:
        text = (await client.get("/metrics")).text
    assert f'ocm_replica_bound{{model="{MODEL}",replica="http://llama.test:8080"}} 3.0' in text
    assert f'ocm_replica_waiting{{model="{MODEL}",replica="http://llama.test:8080"}} 0.0' in text
