"""A key without limits makes no Redis round trip (app/http/counters.py RedisCounters, as the
machine's counter service and LocalCounters already skip it): admit, release, the tokens charge,
streamed and non-streamed generations, counted on a real ``redis-server`` by its own command
statistics; a key with a limit is still counted (the same count is not 0 there)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.http.counters import Budget, RedisCounters
from tests.support.gateway import MODEL, config, gateway
from tests.support.redis_server import RedisServer, redis_server
from tests.support.switch_model import Switch, answer

pytestmark = pytest.mark.timeout(60)
KEY = "sk-unlimited-redis"
AUTH = {"authorization": f"Bearer {KEY}"}
UNLIMITED = Budget(rpm=None, tpm=None, concurrent=None)
MEASURING = {"cmdstat_info", "cmdstat_config|resetstat"}  # this test's own questions


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
async def client(redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.from_url(redis.url)
    try:
        yield c
    finally:
        await c.aclose()


async def _commands(client: aioredis.Redis) -> int:
    """Commands the server ran since the last reset, this test's own left out."""
    stats = await client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k not in MEASURING)


async def _reset(client: aioredis.Redis) -> None:
    await client.config_resetstat()
    assert await _commands(client) == 0


async def _settled(counters: RedisCounters) -> None:
    """The releases (sent from tasks of their own) have reached Redis."""
    await asyncio.gather(*counters._pending)


async def _requests(counters: RedisCounters, budget: Budget, n: int) -> None:
    for i in range(n):
        assert await counters.admit("team", budget, generation=True, lease=f"g{i}") is None
        counters.release("team", f"g{i}", 120)  # the slot back, and 120 tokens charged
        await _settled(counters)
        assert await counters.admit("team", budget, generation=False, lease=f"r{i}") is None


async def test_an_unlimited_key_makes_no_round_trip_on_any_path(client: aioredis.Redis) -> None:
    counters = RedisCounters(client)
    await _reset(client)
    await _requests(counters, UNLIMITED, 10)
    assert await _commands(client) == 0
    # a tokens-per-minute limit alone counts generations, not other requests
    tpm = Budget(rpm=None, tpm=100_000, concurrent=None)
    await _reset(client)
    await _requests(counters, tpm, 10)
    assert await _commands(client) >= 20  # 10 admissions and 10 releases
    assert await client.zcard("ocm:limits:team:tokens") == 10


async def test_a_limited_key_is_still_counted_and_released(client: aioredis.Redis) -> None:
    counters = RedisCounters(client)
    await _reset(client)
    await _requests(counters, Budget(rpm=1000, tpm=None, concurrent=2), 10)
    assert await _commands(client) >= 30  # 20 admissions, 10 releases
    assert await client.zcard("ocm:limits:team:slots") == 0  # every slot given back
    assert await client.zcard("ocm:limits:team:requests") == 20


class SlowReplies:
    """The Redis client with each script's reply held back until ``replies`` is set (a client
    that leaves after Redis ran the admission, before its answer arrived)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.replies = asyncio.Event()

    def register_script(self, source: str) -> Any:
        script = self.client.register_script(source)

        async def call(**kwargs: Any) -> Any:
            out = await script(**kwargs)
            await self.replies.wait()
            return out

        return call


async def test_a_generation_cancelled_in_its_admission_gives_its_slot_back(client: aioredis.Redis) -> None:
    slow = SlowReplies(client)
    counters = RedisCounters(slow)
    budget = Budget(rpm=None, tpm=None, concurrent=1)
    admit = asyncio.create_task(counters.admit("team", budget, generation=True, lease="gone"))
    for _ in range(200):  # Redis ran the script: the slot is taken, its answer held back
        if await client.zcard("ocm:limits:team:slots") == 1:
            break
        await asyncio.sleep(0.01)
    assert await client.zcard("ocm:limits:team:slots") == 1
    slow.replies.set()  # the release goes through at once
    admit.cancel()
    await asyncio.gather(admit, return_exceptions=True)
    await _settled(counters)
    assert await client.zcard("ocm:limits:team:slots") == 0
    assert await counters.admit("team", budget, generation=True, lease="next") is None


def _cfg(url: str, **limits: Any) -> Any:
    entry = {"name": "team", "sha256": hashlib.sha256(KEY.encode()).hexdigest(), **limits}
    return config().model_copy(update={
        "auth": config().auth.model_validate({"keys": [entry]}),
        "redis": config().redis.model_validate({"url": url})})


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
REQUESTS = [("/v1/chat/completions", CHAT), ("/v1/chat/completions", {**CHAT, "stream": True}),
            ("/v1/responses", {"model": MODEL, "input": "hi", "store": False}),
            ("/v1/responses", {"model": MODEL, "input": "hi", "store": False, "stream": True})]


@pytest.mark.parametrize(("limits", "unlimited"), [({}, True), ({"requests_per_minute": 1000}, False)])
async def test_gateway_requests_of_an_unlimited_key_send_redis_nothing(
        redis: RedisServer, client: aioredis.Redis, limits: dict[str, int], unlimited: bool) -> None:
    async with gateway(Switch(answer("ok")).transport(), _cfg(redis.url, **limits)) as gw:
        assert (await gw.post("/v1/chat/completions", json=CHAT, headers=AUTH)).status_code == 200
        await asyncio.sleep(0.3)  # startup's own commands (the signals' subscription) are done
        await _reset(client)
        for path, body in REQUESTS * 3:
            r = await gw.post(path, json=body, headers=AUTH)
            assert r.status_code == 200, r.text
        await asyncio.sleep(0.1)  # releases go from tasks of their own
        sent = await _commands(client)
    if unlimited:
        assert sent == 0
    else:
        assert sent >= 2 * len(REQUESTS) * 3  # an admission and a release per generation
