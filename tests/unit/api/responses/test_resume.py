"""Resumable streams: ``GET /v1/responses/{id}?stream=true&starting_after=N`` replays a
background response's events and follows it while it runs (issue 17, item 3).  Every
replayed stream is checked by the Open Responses order validator."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, alice_and_bob, config, gateway
from tests.support.openresponses import check_stream
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.unit.api.responses.test_routes import REASONING, _sse


def _events(r: httpx.Response) -> list[dict[str, Any]]:
    assert r.status_code == 200, r.text
    events, names, done = _sse(r.text)
    assert done and names == [e["type"] for e in events]
    return events


async def test_a_background_stream_replays_whole_and_from_any_point(tmp_path: Path) -> None:
    db = str(tmp_path / "r.sqlite3")
    async with gateway(FakeLlamaCpp(REASONING).transport(), config(store_path=db)) as c:
        live = _events(await c.post("/v1/responses", json={
            "model": MODEL, "input": "hi", "background": True, "stream": True}))
        final = check_stream(live)
        assert final["status"] == "completed" and final["background"] is True
        rid = final["id"]
        assert _events(await c.get(f"/v1/responses/{rid}", params={"stream": "true"})) == live
        for after in (-1, 0, 3, len(live) - 2):
            got = _events(await c.get(f"/v1/responses/{rid}", params={"stream": "true",
                                                                         "starting_after": after}))
            assert got == [e for e in live if e["sequence_number"] > after]
        last = live[-1]["sequence_number"]
        assert _events(await c.get(f"/v1/responses/{rid}?stream=true&starting_after={last}")) == []
    # kept with the response: a restarted gateway replays the same events
    async with gateway(FakeLlamaCpp(REASONING).transport(), config(store_path=db)) as c:
        assert _events(await c.get(f"/v1/responses/{rid}", params={"stream": "true"})) == live
        assert (await c.delete(f"/v1/responses/{rid}")).status_code == 200
        assert (await c.get(f"/v1/responses/{rid}", params={"stream": "true"})).status_code == 404


async def test_a_reader_follows_a_response_in_flight() -> None:
    upstream = EndlessUpstream()
    async with gateway(endless_transport(upstream)) as c:
        created = (await c.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                       "background": True})).json()
        await upstream.five_sent.wait()
        rid = created["id"]
        readers = [asyncio.ensure_future(c.get(f"/v1/responses/{rid}", params=params))
                   for params in ({"stream": "true"}, {"stream": "true", "starting_after": 2})]
        await asyncio.sleep(0.1)
        assert not any(r.done() for r in readers)  # following, not finished
        assert (await c.post(f"/v1/responses/{rid}/cancel")).json()["status"] == "cancelled"
        whole, tail = [_events(await asyncio.wait_for(r, 5)) for r in readers]
    assert check_stream(whole)["status"] == "cancelled"
    assert tail == [e for e in whole if e["sequence_number"] > 2]
    assert upstream.closed_at is not None


async def test_the_openai_sdk_retrieves_a_stream() -> None:
    async with gateway(FakeLlamaCpp(REASONING).transport()) as c:
        created = (await c.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                       "background": True})).json()
        sdk = AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=c, max_retries=0)
        for _ in range(50):  # let the background run finish
            if (await c.get(f"/v1/responses/{created['id']}")).json()["status"] == "completed":
                break
            await asyncio.sleep(0.02)
        stream = await sdk.responses.retrieve(created["id"], stream=True, starting_after=1)
        types = [event.type async for event in stream]
    assert types[0] != "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types


@pytest.mark.parametrize(("url", "param", "status"), [
    ("/v1/responses/{id}?stream=true", "stream", 400),  # not a background response
    ("/v1/responses/{id}?starting_after=2", "starting_after", 400),
    ("/v1/responses/{id}?stream=true&starting_after=-2", "starting_after", 400),
    ("/v1/responses/resp_nope?stream=true", "response_id", 404),
])
async def test_what_cannot_be_streamed_again(url: str, param: str, status: int) -> None:
    async with gateway(FakeLlamaCpp(REASONING).transport()) as c:
        rid = (await c.post("/v1/responses", json={"model": MODEL, "input": "hi"})).json()["id"]
        r = await c.get(url.format(id=rid))
    assert r.status_code == status and r.json()["error"]["param"] == param


async def test_another_tenant_cannot_follow() -> None:
    cfg = alice_and_bob()
    async with gateway(FakeLlamaCpp(REASONING).transport(), cfg) as c:
        r = await c.post("/v1/responses", headers={"authorization": "Bearer alice"},
                         json={"model": MODEL, "input": "hi", "background": True, "stream": True})
        rid = _events(r)[0]["response"]["id"]
        bob = await c.get(f"/v1/responses/{rid}?stream=true", headers={"authorization": "Bearer bob"})
        alice = await c.get(f"/v1/responses/{rid}?stream=true", headers={"authorization": "Bearer alice"})
    assert bob.status_code == 404 and alice.status_code == 200
