"""Two gateways on one PostgreSQL (``[store] url``): a response made on one is read,
continued, listed and deleted on the other; a conversation grows from both; with Redis too,
a cancel on one stops the run on the other (even when the first signal is lost), and a stream
started on one resumes on the other."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.gateway import MODEL, config, gateway
from tests.support.postgres import fresh_database, postgres_cluster, postgres_server
from tests.support.redis_server import redis_server
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.switch_model import Switch, answer


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def on(url: str, tmp: Any, redis: str | None = None) -> Any:
    """A gateway's config on database ``url`` (and Redis, when given); its SQLite file ``tmp``."""
    c = config(store_path=str(tmp))
    return c.model_copy(update={"store": c.store.model_copy(update={"url": url}),
                                "redis": c.redis.model_validate({"url": redis})})


@dataclass
class Pair:
    a: Any  # the replica that runs the response
    b: Any
    upstream: EndlessUpstream
    rid: str  # a background response A runs on an upstream that never ends
    redis: str


@contextlib.asynccontextmanager
async def background_on_a(postgres: str, tmp_path: Any) -> AsyncIterator[Pair]:
    """Two replicas on one database and one Redis; A runs a background response whose
    upstream has sent five chunks and never ends."""
    url = await fresh_database(postgres)
    upstream = EndlessUpstream()
    with redis_server() as redis:
        async with gateway(endless_transport(upstream), on(url, tmp_path / "a.sqlite3", redis.url)) as a, \
                gateway(Switch(answer("x")).transport(), on(url, tmp_path / "b.sqlite3", redis.url)) as b:
            rid = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                        "background": True})).json()["id"]
            await asyncio.wait_for(upstream.five_sent.wait(), 5)
            yield Pair(a, b, upstream, rid, redis.url)


async def test_one_service_whichever_replica(postgres: str, tmp_path: Any) -> None:
    url = await fresh_database(postgres)
    model = Switch(answer("Hello."), ("Again", answer("Hello again.")))
    async with gateway(model.transport(), on(url, tmp_path / "a.sqlite3")) as a, \
            gateway(model.transport(), on(url, tmp_path / "b.sqlite3")) as b:
        first = (await a.post("/v1/responses", json={"model": MODEL, "input": "Hi"})).json()
        assert first["status"] == "completed"
        got = await b.get(f"/v1/responses/{first['id']}")
        assert got.status_code == 200 and got.json()["output"] == first["output"]
        second = await b.post("/v1/responses", json={"model": MODEL, "input": "Again",
                                                      "previous_response_id": first["id"]})
        assert second.status_code == 200, second.text
        assert "Hi" in model.prompts[-1] and "Hello." in model.prompts[-1]  # A's turn in B's prompt
        items = (await a.get(f"/v1/responses/{second.json()['id']}/input_items")).json()["data"]
        assert [i["type"] for i in items][:1] == ["message"]
        listed = await a.get("/v1/responses")
        assert listed.status_code == 200, listed.text
        assert {r["id"] for r in listed.json()["data"]} >= {first["id"], second.json()["id"]}
        conv = (await a.post("/v1/conversations", json={"items": [
            {"type": "message", "role": "user", "content": "from A"}]})).json()
        r = await b.post("/v1/responses", json={"model": MODEL, "input": "Again",
                                                 "conversation": conv["id"]})
        assert r.status_code == 200, r.text
        seen = (await a.get(f"/v1/conversations/{conv['id']}/items", params={"order": "asc"})).json()["data"]
        assert [i["type"] for i in seen] == ["message", "message", "message"]  # A's, B's input, the answer
        assert (await b.delete(f"/v1/responses/{first['id']}")).status_code == 200
        assert (await a.get(f"/v1/responses/{first['id']}")).status_code == 404


async def test_the_database_going_away_is_a_503_and_coming_back_is_recovery(tmp_path: Any) -> None:
    """PostgreSQL stopped under a running gateway: stateful calls answer 503 with Retry-After,
    ``store: false`` keeps working; started again, the same gateway serves what was stored."""
    with postgres_cluster() as pg:
        model = Switch(answer("Hello."))
        async with gateway(model.transport(), on(pg.url, tmp_path / "a.sqlite3")) as c:
            first = (await c.post("/v1/responses", json={"model": MODEL, "input": "Hi"})).json()
            pg.stop()
            down = await c.get(f"/v1/responses/{first['id']}")
            assert down.status_code == 503 and down.json()["error"]["code"] == "store_unavailable"
            assert int(down.headers["retry-after"]) >= 1
            stored = await c.post("/v1/responses", json={"model": MODEL, "input": "Hi"})
            assert stored.status_code == 503
            plain = await c.post("/v1/responses", json={"model": MODEL, "input": "Hi", "store": False})
            assert plain.status_code == 200 and plain.json()["status"] == "completed"
            pg.start()
            back = await c.get(f"/v1/responses/{first['id']}")
            assert back.status_code == 200 and back.json()["output"] == first["output"]


async def test_a_cancel_on_one_replica_stops_the_run_on_another(postgres: str, tmp_path: Any) -> None:
    """A background response runs on A (an upstream that never ends); ``POST .../cancel`` lands
    on B: published on Redis, A cancels its run and stores the end, B answers with it."""
    async with background_on_a(postgres, tmp_path) as p:
        await asyncio.sleep(0.2)  # A's listener is subscribed by now
        t0 = time.monotonic()
        cancelled = await p.b.post(f"/v1/responses/{p.rid}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled" and time.monotonic() - t0 < 1.0
        assert p.upstream.closed_at is not None  # A closed its upstream request
        assert (await p.a.get(f"/v1/responses/{p.rid}")).json()["status"] == "cancelled"


async def test_a_cancel_reaches_a_replica_that_missed_the_first_signal(postgres: str, tmp_path: Any) -> None:
    """Redis pub/sub delivers only to listeners subscribed at that moment: A's subscription is
    killed (``CLIENT KILL TYPE pubsub``) just before B's cancel, so the first signal is lost
    while A re-subscribes (1 s). B publishes again until the end is stored: the cancel lands."""
    import redis.asyncio as aioredis

    from app.engine.signals import CHANNEL

    async with background_on_a(postgres, tmp_path) as p:
        await asyncio.sleep(0.2)
        admin = aioredis.from_url(p.redis)
        try:
            assert await admin.client_kill_filter(_type="pubsub") >= 1
            assert await admin.pubsub_numsub(CHANNEL) == [(CHANNEL.encode(), 0)]  # nobody listens now
        finally:
            await admin.aclose()
        cancelled = await p.b.post(f"/v1/responses/{p.rid}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        assert p.upstream.closed_at is not None


async def test_a_stream_resumes_on_another_replica(postgres: str, tmp_path: Any) -> None:
    """``GET /v1/responses/{id}?stream=true&starting_after=N`` on B follows the background run
    A owns, live, from its Redis copy: no gap, no duplicate, one terminal event; the same
    events A stores at the end."""
    async with background_on_a(postgres, tmp_path) as p:
        async def events_of(replica: Any) -> list[Any]:
            async with replica.stream("GET", f"/v1/responses/{p.rid}",
                                      params={"stream": "true", "starting_after": "2"}) as r:
                assert r.status_code == 200
                return [json.loads(line[6:]) for line in [x async for x in r.aiter_lines()]
                        if line.startswith("data: ") and line != "data: [DONE]"]

        reader = asyncio.ensure_future(events_of(p.b))
        await asyncio.sleep(0.5)  # B is following live
        assert (await p.a.post(f"/v1/responses/{p.rid}/cancel")).status_code == 200
        events = await asyncio.wait_for(reader, 10)
        seqs = [e["sequence_number"] for e in events]
        assert seqs == list(range(3, 3 + len(seqs))) and len(seqs) > 3  # no gap, no duplicate
        kinds = [e["type"] for e in events]
        assert kinds[-1] == "response.failed" and sum(k.startswith("response.failed") for k in kinds) == 1
        assert await events_of(p.a) == events  # what B followed live is what A stored


async def test_postgres_and_redis_going_away_under_load(tmp_path: Any) -> None:
    """Two gateways under a steady load (16 clients) while Redis, then PostgreSQL, stop and come
    back: every answer is a 200 or a clear 503 (never another error, never a hang); every
    response answered 200 with ``store: true`` reads back whole afterwards; both gateways recover
    without a restart."""
    with postgres_cluster() as pg, redis_server() as redis:
        url = await fresh_database(pg.url)

        model = Switch(answer("Steady."))
        async with gateway(model.transport(), on(url, tmp_path / "a.sqlite3", redis.url)) as a, \
                gateway(model.transport(), on(url, tmp_path / "b.sqlite3", redis.url)) as b:
            stored: dict[str, Any] = {}
            statuses: list[int] = []
            slowest = 0.0
            stop = asyncio.Event()

            async def client(n: int) -> None:
                nonlocal slowest
                c = a if n % 2 else b
                while not stop.is_set():
                    began = time.monotonic()
                    r = await asyncio.wait_for(c.post("/v1/responses", json={
                        "model": MODEL, "input": f"load {n}", "store": n % 4 != 0}), 10)
                    slowest = max(slowest, time.monotonic() - began)
                    statuses.append(r.status_code)
                    if r.status_code == 200 and n % 4 != 0:
                        stored[r.json()["id"]] = r.json()["output"]
                    elif r.status_code == 503:
                        assert r.json()["error"]["code"] in ("store_unavailable", "limits_unavailable")
                        await asyncio.sleep(0.05)

            clients = [asyncio.ensure_future(client(n)) for n in range(16)]
            await asyncio.sleep(0.5)
            redis.stop()
            await asyncio.sleep(0.5)
            redis.start()
            await asyncio.sleep(0.5)
            pg.stop()
            await asyncio.sleep(0.7)
            pg.start()
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*clients)
            # The outage was felt: a 503, or a stored answer held until its end could be stored (a
            # non-stream response's start is written alongside its generation, and its end retried
            # for END_WAIT: one that ran through the 0.7 s outage answers 200 once PostgreSQL is back).
            assert set(statuses) <= {200, 503} and (503 in statuses or slowest >= 0.5)
            assert statuses[-16:].count(200) >= 8
            for rid, output in stored.items():  # nothing lost or half-written
                got = await (a if hash(rid) % 2 else b).get(f"/v1/responses/{rid}")
                assert got.status_code == 200 and got.json()["output"] == output
            assert len(stored) > 50
