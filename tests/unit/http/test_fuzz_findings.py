"""What the generation fuzzer (``test_fuzz_generation.py``) found, as explicit reproducers.

* One upstream stream event carrying 50,000-100,000 token ids (a hostile or batching backend; the
  ``huge_delta`` misbehaviour) blocked the event loop for 0.3-0.7 s (``/health`` with it) and
  goes out as one SSE event per token (22 MB).  Half fixed: the run gives the loop back every
  128 events (``YIELD_EVERY`` in ``app/engine/run.py``), which took the worst gap from 290-730
  ms to 160-200 ms; what is left is the parser's ``feed`` of the whole chunk in one call (the
  stream layer could feed a huge chunk in slices; the encoders could coalesce one chunk's
  deltas).  Still a known failure against the issue's 50 ms bar: ``xfail(strict=True)``.
* ``DELETE /v1/responses/{id}`` of a background response whose run was still going answered
  ``200 {"deleted": true}``, yet ``GET`` still answered 200 and, when the run ended, the
  response was stored ``completed`` and readable for good (``test_fuzz_races.py`` found it).
  Fixed: the delete cancels the run and deletes once its end is stored.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support.fuzz_bodies import KEYS, fuzz_config
from tests.support.gateway import gateway
from tests.support.hostile_upstream import HELLO, HostileLlamaCpp, _Body, _event, _final, harmony_events

N = 100_000
LOOP_BUDGET = 0.05  # seconds: the bar for /health


def _huge_event(request: httpx.Request) -> httpx.Response:
    if request.method == "GET":
        return httpx.Response(404)
    chunks = [
        *harmony_events("<|channel|>final<|message|>"),
        _event("Hello" * N, [HELLO] * N, 4),
        *harmony_events("<|return|>"),
        _final(N + 4),
    ]
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Body(chunks))


async def _worst_gap(path: str, body: dict[str, object]) -> tuple[httpx.Response, float]:
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with gateway(httpx.MockTransport(_huge_event), fuzz_config()) as c:
        ticker = asyncio.create_task(tick())
        r = await c.post(
            path, json={"model": "gpt-oss-test", **body}, headers={"authorization": f"Bearer {KEYS['a']}"}
        )
        ticker.cancel()
    return r, max(gaps)


@pytest.mark.xfail(strict=True, reason="known: the parser feeds a 100k-token event in one call")
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
            ("/v1/responses", {"input": "hi"}),
    ],
)
async def test_known_failure_one_huge_upstream_event_blocks_the_event_loop(
    path: str, body: dict[str, object]
) -> None:
    r, gap = await _worst_gap(path, body)
    assert r.status_code == 200, r.text[:300]
    assert gap < LOOP_BUDGET, f"the event loop was blocked {gap:.2f} s"


@pytest.mark.parametrize("wait", [0.0, 0.05])
async def test_a_response_deleted_during_its_run_stays_deleted(wait: float) -> None:
    upstream = HostileLlamaCpp()
    headers = {"authorization": f"Bearer {KEYS['a']}"}
    async with gateway(upstream.transport(), fuzz_config()) as c:
        upstream.reseed(0, ["slow"])  # a valid answer, one event every 10 ms
        r = await c.post("/v1/responses", json={"model": "gpt-oss-test", "input": "hi", "background": True},
                         headers=headers)
        rid = r.json()["id"]
        await asyncio.sleep(wait)
        deleted = await c.delete(f"/v1/responses/{rid}", headers=headers)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        await asyncio.sleep(0.5)  # the run has ended
        after = await c.get(f"/v1/responses/{rid}", headers=headers)
    assert after.status_code == 404, f"deleted, yet {after.status_code} {after.text[:200]}"
