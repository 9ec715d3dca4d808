"""Per-key limits shared by replicas through Redis (``[redis] url``; app/http/counters.py):
two gateways on one real ``redis-server``, a key's budget holds whichever replica a request
lands on; Redis going away follows ``on_failure``."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway import MODEL, config, gateway
from tests.support.redis_server import RedisServer, redis_server
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.switch_model import Switch, answer

pytestmark = pytest.mark.timeout(60)
KEY = "sk-shared-limits"
AUTH = {"authorization": f"Bearer {KEY}"}
BODY = {"model": MODEL, "input": "hi", "store": False}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


def cfg(url: str, on_failure: str = "open", **key: Any) -> Any:
    entry = {"name": "team", "sha256": hashlib.sha256(KEY.encode()).hexdigest(), **key}
    return config().model_copy(update={
        "auth": config().auth.model_validate({"keys": [entry]}),
        "redis": config().redis.model_validate({"url": url, "on_failure": on_failure})})


async def test_a_per_key_rpm_holds_across_replicas(redis: RedisServer) -> None:
    model = Switch(answer("ok"))
    async with gateway(model.transport(), cfg(redis.url, requests_per_minute=5)) as a, \
            gateway(model.transport(), cfg(redis.url, requests_per_minute=5)) as b:
        codes = [(await (a if i % 2 else b).post("/v1/responses", json=BODY, headers=AUTH)).status_code
                 for i in range(10)]
        assert sorted(codes) == [200] * 5 + [429] * 5 and codes[:5] == [200] * 5
        refused = await a.post("/v1/responses", json=BODY, headers=AUTH)
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"


async def test_concurrency_is_one_budget_for_all_replicas(redis: RedisServer) -> None:
    upstream = EndlessUpstream()
    async with gateway(endless_transport(upstream), cfg(redis.url, max_concurrent=1)) as a, \
            gateway(Switch(answer("ok")).transport(), cfg(redis.url, max_concurrent=1)) as b:
        first = asyncio.ensure_future(a.post("/v1/responses", json=BODY, headers=AUTH))
        await upstream.five_sent.wait()  # A holds the key's only slot
        r = await b.post("/v1/responses", json=BODY, headers=AUTH)
        assert r.status_code == 429 and r.json()["error"]["code"] == "concurrency_limit_exceeded"
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        for _ in range(100):  # the slot comes back when A's request ends
            r = await b.post("/v1/responses", json=BODY, headers=AUTH)
            if r.status_code == 200:
                break
            await asyncio.sleep(0.02)
        assert r.status_code == 200


@pytest.mark.parametrize(("policy", "status"), [("open", 200), ("closed", 503)])
async def test_redis_down_follows_the_policy(redis: RedisServer, policy: str, status: int) -> None:
    settings = cfg(redis.url, policy, requests_per_minute=100)
    async with gateway(Switch(answer("ok")).transport(), settings) as c:
        assert (await c.post("/v1/responses", json=BODY, headers=AUTH)).status_code == 200
        redis.stop()
        r = await c.post("/v1/responses", json=BODY, headers=AUTH)
        assert r.status_code == status, r.text
        if status == 503:
            assert r.json()["error"]["code"] == "limits_unavailable" and "retry-after" in r.headers
        assert (await c.get("/health")).status_code == 200  # reads are not counted
        redis.start()
        assert (await c.post("/v1/responses", json=BODY, headers=AUTH)).status_code == 200  # recovered


async def test_an_upstream_failing_on_one_replica_is_skipped_by_the_others(redis: RedisServer) -> None:
    """Upstream x answers 503 to A: A fails over to y and puts x in cooldown, and so does B
    (told through Redis) before ever trying x itself."""
    answering = Switch(answer("ok"))
    seen_by_b: list[str] = []

    def a_upstream(request: httpx.Request) -> httpx.Response:
        if request.url.host == "x.test":
            return httpx.Response(503, json={"error": "overloaded"})
        return answering(request)

    def b_upstream(request: httpx.Request) -> httpx.Response:
        seen_by_b.append(f"{request.url.host}{request.url.path}")
        return answering(request)

    def two(url: str) -> Any:
        c = cfg(url)
        model = c.models[MODEL].model_copy(update={"base_urls": ["http://x.test:8080", "http://y.test:8080"]})
        return c.model_copy(update={"models": {MODEL: model}, "auth": c.auth.model_validate({})})

    async with gateway(httpx.MockTransport(a_upstream), two(redis.url)) as a, \
            gateway(httpx.MockTransport(b_upstream), two(redis.url)) as b:
        await asyncio.sleep(0.3)  # both listeners subscribed
        assert (await a.post("/v1/responses", json=BODY)).status_code == 200  # via y
        for _ in range(50):
            await asyncio.sleep(0.02)
            if b._transport.app.state.registry.pools()[0].replicas[0].cooldown_until > 0:  # type: ignore[attr-defined]
                break
        assert (await b.post("/v1/responses", json=BODY)).status_code == 200
    # B's generation went to y at once (/props is read when B starts, before any cooldown)
    assert [s for s in seen_by_b if s.endswith("/completion")] == ["y.test/completion"]
