"""Routing and resilience against real loopback servers (raw asyncio): refused connections,
5xx, stalls and truncated streams; least-outstanding balancing; nothing retried after bytes.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest

from adapters.routing import ReplicaPool, RetryPolicy
from tests.support.gateway import MODEL, config, gateway
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.wire import load

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]

pytestmark = pytest.mark.timeout(60)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens here any more: connection refused


@contextmanager
def _servers(*servers: LoopbackUpstream) -> Iterator[list[str]]:
    with ExitStack() as stack:
        yield [stack.enter_context(s.running()) for s in servers]


def _cfg(urls: list[str], **upstream: Any) -> Any:
    data = config().model_dump()
    data["models"][MODEL]["base_urls"] = urls
    data["upstream"].update({"retry_backoff": 0.01, **upstream})
    return type(config()).model_validate(data)


async def _chat(urls: list[str], stream: bool = False, **upstream: Any) -> httpx.Response:
    async with gateway(httpx.AsyncHTTPTransport(), _cfg(urls, **upstream)) as c:
        return await c.post("/v1/chat/completions", json={**CHAT, "stream": stream})


@pytest.mark.parametrize("bad", ["refused", "error500", "stall"])
async def test_failover_before_first_byte(bad: str) -> None:
    good = LoopbackUpstream(mode="final", events=FINAL)
    failing = [] if bad == "refused" else [LoopbackUpstream(mode=bad)]
    with _servers(*failing, good) as urls:
        first = _closed_port_url() if bad == "refused" else urls[0]
        r = await _chat([first, urls[-1]], first_byte_timeout=5, attempt_timeout=0.5)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Hello from a scripted tiny model!"
    assert good.requests == 1


@pytest.mark.parametrize(("bad", "status", "code"), [
    ("refused", 502, "upstream_unavailable"), ("error500", 502, "upstream_error"),
    ("stall", 504, "upstream_timeout")])
async def test_all_replicas_failing_is_a_clear_error(bad: str, status: int, code: str) -> None:
    servers = [] if bad == "refused" else [LoopbackUpstream(mode=bad), LoopbackUpstream(mode=bad)]
    with _servers(*servers) as urls:
        targets = [_closed_port_url(), _closed_port_url()] if bad == "refused" else urls
        r = await _chat(targets, first_byte_timeout=5, attempt_timeout=0.3, max_attempts=2)
    assert r.status_code == status and r.json()["error"]["code"] == code
    assert sum(s.requests for s in servers) == (0 if bad == "refused" else 2)  # bounded attempts


async def test_truncated_stream_is_not_retried() -> None:
    truncating = LoopbackUpstream(mode="truncate", events=FINAL, truncate_after=4)
    spare = LoopbackUpstream(mode="final", events=FINAL)
    with _servers(truncating, spare) as urls:
        r = await _chat(urls, stream=True)
    assert r.status_code == 200
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]" and '"error"' in data[-2]
    assert spare.requests == 0  # bytes had been sent: no retry on another replica


async def test_idle_timeout_mid_stream_ends_with_an_error_event() -> None:
    slow = LoopbackUpstream(mode="endless", interval=2.0)
    with _servers(slow) as urls:
        r = await _chat(urls, stream=True, read_timeout=0.3)
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert '"upstream_timeout"' in data[-2] and data[-1] == "[DONE]"


async def test_least_outstanding_and_cooldown() -> None:
    pool = ReplicaPool(["http://a", "http://b"], RetryPolicy(cooldown=60))
    first = pool.pick(set())
    first.outstanding += 1
    assert pool.pick(set()).url == "http://b"  # the idle replica wins
    pool.fail(pool.replicas[1])
    assert pool.pick(set()).url == "http://a"  # b is cooling down
    pool.fail(pool.replicas[0])
    assert pool.pick(set()).url in ("http://a", "http://b")  # all cooling: still serve


async def test_concurrent_requests_spread_over_replicas() -> None:
    # Paced answers (~0.2 s each), so the six requests are really in flight together.
    a, b = (LoopbackUpstream(mode="final", events=FINAL, pace=True, interval=0.01) for _ in range(2))
    with _servers(a, b) as urls:
        async with gateway(httpx.AsyncHTTPTransport(), _cfg(urls)) as c:
            results = await asyncio.gather(*(c.post("/v1/chat/completions", json=CHAT) for _ in range(6)))
    assert all(r.status_code == 200 for r in results)
    assert a.requests >= 1 and b.requests >= 1 and a.requests + b.requests == 6


async def test_first_byte_timeout_bounds_all_attempts_together() -> None:
    """Three silent replicas and three attempts: a 504 after first_byte_timeout, not 3x it."""
    servers = [LoopbackUpstream(mode="stall") for _ in range(3)]
    with _servers(*servers) as urls:
        t0 = asyncio.get_running_loop().time()
        r = await _chat(urls, first_byte_timeout=0.6, max_attempts=3)
        elapsed = asyncio.get_running_loop().time() - t0
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
    assert elapsed < 1.5, elapsed  # per-attempt timeouts would take 1.8 s
    assert sum(s.requests for s in servers) == 1  # a stall uses the whole budget: no retry


async def test_attempt_timeout_fails_over_within_the_total_budget() -> None:
    servers = [LoopbackUpstream(mode="stall") for _ in range(3)]
    with _servers(*servers) as urls:
        t0 = asyncio.get_running_loop().time()
        r = await _chat(urls, first_byte_timeout=0.7, attempt_timeout=0.3, max_attempts=3)
        elapsed = asyncio.get_running_loop().time() - t0
    assert r.status_code == 504
    assert sum(s.requests for s in servers) == 3  # 0.3 + 0.3 + the 0.1 s left
    assert elapsed < 1.6, elapsed  # not 3 x 0.3 s + a full 0.7 s


@pytest.mark.parametrize("mode", ["empty", "error500", "stall", "final"])
async def test_outstanding_returns_to_zero_however_the_attempt_ends(mode: str) -> None:
    server = LoopbackUpstream(mode=mode, events=FINAL)
    with _servers(server) as urls:
        async with gateway(httpx.AsyncHTTPTransport(), _cfg(urls, first_byte_timeout=0.3,
                                                            max_attempts=1)) as c:
            r = await c.post("/v1/chat/completions", json=CHAT)
            pool = c._transport.app.state.registry.routes[MODEL].backend.pool  # type: ignore[attr-defined]
    assert r.status_code == (200 if mode == "final" else 502 if mode != "stall" else 504), r.text
    assert [x.outstanding for x in pool.replicas] == [0]


async def test_finished_answers_leave_their_upstream_connection_for_the_next_request() -> None:
    """The recorded llama.cpp answer over a keep-alive loopback server: ten requests, streaming
    and not, one TCP connection (before: one connection per request, the body's end unread)."""
    upstream = LoopbackUpstream(mode="final", events=FINAL, keep_alive=True)
    with _servers(upstream) as urls:
        async with gateway(httpx.AsyncHTTPTransport(), _cfg(urls)) as c:
            for n in range(10):
                r = await c.post("/v1/chat/completions", json={**CHAT, "stream": n % 2 == 0})
                assert r.status_code == 200
                assert (r.text.endswith("data: [DONE]\n\n") if n % 2 == 0 else
                        r.json()["choices"][0]["message"]["content"] == "Hello from a scripted tiny model!")
    assert upstream.requests == 10
    assert upstream.connections == 1


def test_affinity_sends_a_key_home_unless_home_is_busy_or_cooling() -> None:
    from adapters.routing import AFFINITY_SLACK, ReplicaPool, home_of

    urls = ["http://a:1", "http://b:1", "http://c:1"]
    keys = [f"key-{n}" for n in range(60)]
    homes = {k: home_of(k, urls) for k in keys}
    assert set(homes.values()) == set(urls)  # keys spread over every replica
    pool = ReplicaPool(urls)
    for k in keys:
        assert pool.pick(set(), k).url == homes[k]
    key = keys[0]
    home = next(r for r in pool.replicas if r.url == homes[key])
    home.outstanding = AFFINITY_SLACK  # busier, within the slack: still home
    assert pool.pick(set(), key) is home
    home.outstanding = AFFINITY_SLACK + 1  # beyond it: the least busy instead
    assert pool.pick(set(), key) is not home
    home.outstanding = 0
    pool.fail(home)  # cooling down: elsewhere
    assert pool.pick(set(), key) is not home
    assert pool.pick({homes[keys[1]]}, keys[1]).url != homes[keys[1]]  # already tried: elsewhere
    # Another gateway's pool (same URLs, any order) sends the key to the same home.
    assert ReplicaPool(list(reversed(urls))).pick(set(), keys[1]).url == homes[keys[1]]
