"""Overload degrades gracefully, against the real ``ocm-gateway serve`` process and a real
loopback upstream: beyond the generation slots requests queue; beyond the queue (or its
deadline) they get a fast 503 with Retry-After; /health keeps answering; and a scaled-down
load with random disconnects leaves no slot behind (``/metrics``). The full-size run is
``benchmarks/load.py`` (see docs/reliability.md)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from tests.support.gateway import MODEL, sse_payloads
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import gateway_process

pytestmark = pytest.mark.timeout(90)
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
# A short Harmony answer in llama.cpp's framing ("Hi", then <|return|> and the stop event).
ANSWER = [
    b'data: {"content":"x","tokens":[200005],"stop":false}\n\n',
    b'data: {"content":"final","tokens":[17196],"stop":false}\n\n',
    b'data: {"content":"x","tokens":[200008],"stop":false}\n\n',
    b'data: {"content":"Hi","tokens":[12194],"stop":false}\n\n',
    b'data: {"content":"","tokens":[200002],"stop":false}\n\n',
    b'data: {"content":"","tokens":[],"stop":true,"stop_type":"eos","tokens_evaluated":5,'
    b'"tokens_predicted":5,"timings":{}}\n\n']


def _gateway(upstream: str, **limits: object) -> Any:
    return gateway_process(upstream, MODEL, **{f"limits__{k}": v for k, v in limits.items()})


async def _gauge(client: httpx.AsyncClient, name: str) -> float:
    text = (await client.get("/metrics")).text
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, name
    return float(match[1])


async def test_full_queue_is_a_fast_503_and_a_queued_request_runs_later() -> None:
    upstream = LoopbackUpstream(interval=0.01)  # an endless answer
    with upstream.running() as url, _gateway(url, max_inflight=1, max_queue=1, queue_timeout=10) as gw:
        async with httpx.AsyncClient(base_url=gw, timeout=20) as c:
            async with c.stream("POST", "/v1/chat/completions", json=CHAT) as first:
                assert first.status_code == 200
                lines = first.aiter_lines()  # keep it: a dropped iterator closes the response
                await anext(lines)
                async def second() -> int:
                    async with c.stream("POST", "/v1/chat/completions", json=CHAT) as r:
                        await anext(r.aiter_lines())
                        return r.status_code

                queued = asyncio.create_task(second())
                await asyncio.sleep(0.3)
                assert await _gauge(c, "ocm_generations_queued") == 1
                t0 = asyncio.get_running_loop().time()
                r = await c.post("/v1/chat/completions", json=CHAT)
                assert asyncio.get_running_loop().time() - t0 < 2  # not the 10 s queue deadline
                assert r.status_code == 503 and r.json()["error"]["code"] == "server_overloaded"
                assert int(r.headers["retry-after"]) >= 1 and r.headers["retry-after-ms"]
                assert (await c.get("/health")).status_code == 200
                assert not queued.done()
            # The first client is gone: its slot goes to the queued request, which runs.
            assert await asyncio.wait_for(queued, 15) == 200
            assert upstream.requests == 2
            assert await _gauge(c, "ocm_admission_rejected_total") == 1


async def test_waiting_past_the_queue_deadline_is_a_503() -> None:
    upstream = LoopbackUpstream(interval=0.01)
    with upstream.running() as url, _gateway(url, max_inflight=1, max_queue=4, queue_timeout=0.3) as gw:
        async with httpx.AsyncClient(base_url=gw, timeout=20) as c:
            async with c.stream("POST", "/v1/chat/completions", json=CHAT) as first:
                lines = first.aiter_lines()
                await anext(lines)
                r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": True})
                assert r.status_code == 503 and r.json()["error"]["code"] == "server_overloaded"
                r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
                assert r.status_code == 200  # background: accepted, then fails cleanly in its run
                rid = r.json()["id"]
                for _ in range(100):
                    body = (await c.get(f"/v1/responses/{rid}")).json()
                    if body["status"] not in ("queued", "in_progress"):
                        break
                    await asyncio.sleep(0.05)
                assert body["status"] == "failed" and body["error"]["code"] == "server_overloaded"
            assert upstream.requests == 1


async def test_many_concurrent_streams_with_random_disconnects_leave_nothing_behind() -> None:
    upstream = LoopbackUpstream(mode="final", events=ANSWER)
    with upstream.running() as url, _gateway(url, max_inflight=16, max_queue=1000) as gw:
        limits = httpx.Limits(max_connections=400)
        async with httpx.AsyncClient(base_url=gw, timeout=60, limits=limits) as c:
            async def one(n: int) -> str:
                if n % 7 == 0:  # a client that gives up at once
                    try:
                        async with asyncio.timeout(0.002 * (n % 5)):
                            await c.post("/v1/chat/completions", json=CHAT)
                    except TimeoutError:
                        return "gone"
                r = await c.post("/v1/chat/completions", json=CHAT)
                payloads = sse_payloads(r.text)
                assert r.status_code == 200 and payloads[-1] == "[DONE]", r.text
                return "".join(p["choices"][0]["delta"].get("content") or ""
                               for p in payloads[:-1] if p.get("choices"))
            results = await asyncio.gather(*(one(n) for n in range(300)))
            for _ in range(100):
                if await _gauge(c, "ocm_generations_inflight") == 0:
                    break
                await asyncio.sleep(0.05)
            assert await _gauge(c, "ocm_generations_inflight") == 0
            assert await _gauge(c, "ocm_generations_queued") == 0
    assert all(r in ("Hi", "gone") for r in results) and results.count("Hi") >= 250
