"""Replicas under faults, on the real servers (PostgreSQL and Redis from Debian): Redis stopped
under a cancel and a delete (carried to the owner through the store) and under streams followed from
another replica; PostgreSQL stopped around the
end of stored runs; the replica that owns a background run killed with -9 while another
replica's client follows it.  Every answer is what the store records: the response, a clean
503 with ``Retry-After`` in OpenAI's error envelope, or a stream that ends with its terminal event;
never a 500, a cut stream, or ``completed`` for a response the store does not have."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import run_gateway
from tests.support.fake_llamacpp import sse_events
from tests.support.gateway import MODEL, config
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.postgres import Cluster, fresh_database, postgres_cluster
from tests.support.process import crash
from tests.support.redis_server import redis_server
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.switch_model import Switch, answer
from tests.support.ws import served

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Json = dict[str, Any]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with postgres_cluster() as running:
        yield running


@pytest.fixture
def pg(cluster: Cluster) -> Iterator[Cluster]:
    """The module's PostgreSQL (each test on a new database), running again after a test that
    stopped it."""
    yield cluster
    if cluster.proc is None:
        cluster.start()


@contextlib.asynccontextmanager
async def in_process(upstream: httpx.AsyncBaseTransport, cfg: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway in this process behind a real uvicorn server (streams arrive as sent)."""
    async with served(upstream, cfg) as host, \
            httpx.AsyncClient(base_url=f"http://{host}", timeout=60) as client:
        yield client


def on(url: str, tmp: Path, redis: str | None = None, **store: Any) -> Any:
    """A gateway config on database ``url`` (and Redis), its SQLite file ``tmp``."""
    c = config(store_path=str(tmp))
    return c.model_copy(update={"store": c.store.model_copy(update={"url": url, **store}),
                                "redis": c.redis.model_validate({"url": redis})})


async def events_of(lines: AsyncIterator[str], into: list[Json]) -> list[Json]:
    """The SSE payloads of a stream (``[DONE]`` left out), collected as they come."""
    async for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            into.append(json.loads(line[6:]))
    return into


def one_terminal(events: list[Json]) -> Json:
    """The stream's last event, which must be its only terminal one."""
    kinds = [e["type"] for e in events]
    ends = [k for k in kinds if k in ("response.completed", "response.failed", "response.incomplete")]
    assert len(ends) == 1 and kinds[-1] == ends[0], kinds[-5:]
    return events[-1]


def contiguous(events: list[Json], first: int) -> None:
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(first, first + len(seqs))), seqs


async def test_redis_down_a_cancel_reaches_the_owner_through_the_store(
        pg: Cluster, tmp_path: Path) -> None:
    """Redis stopped while A runs a background response that B's client follows from Redis:
    a cancel on B is recorded in the store and A's heartbeat (0.5 s here) ends the run, so the
    cancel answers 200 ``cancelled`` as it does with Redis (was a 500, then a 503
    ``signals_unavailable``); B's stream, and one opened on B after Redis stopped, end with the
    terminal A stores (were cut with no terminal); a rate-limited key still gets through
    (``open``).  Redis back, a cancel on B reaches A through Redis again (no restart)."""
    with redis_server() as redis:
        url = await fresh_database(pg.url)
        upstream = EndlessUpstream()
        b_config = on(url, tmp_path / "b.sqlite3", redis.url, heartbeat_seconds=0.5)
        b_config = b_config.model_copy(update={"limits": b_config.limits.model_copy(
            update={"requests_per_minute": 1000})})
        a_config = on(url, tmp_path / "a.sqlite3", redis.url, heartbeat_seconds=0.5)
        async with in_process(endless_transport(upstream), a_config) as a, \
                in_process(Switch(answer("x")).transport(), b_config) as b:
            rid = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                        "background": True})).json()["id"]
            await asyncio.wait_for(upstream.five_sent.wait(), 5)
            live: list[Json] = []

            async def follow(into: list[Json]) -> list[Json]:
                async with b.stream("GET", f"/v1/responses/{rid}",
                                    params={"stream": "true", "starting_after": "0"}) as r:
                    assert r.status_code == 200
                    return await events_of(r.aiter_lines(), into)

            first = asyncio.ensure_future(follow(live))
            for _ in range(100):  # B follows live from Redis
                if len(live) >= 3:
                    break
                await asyncio.sleep(0.05)
            assert len(live) >= 3
            await asyncio.to_thread(redis.stop)
            plain = await b.post("/v1/responses", json={"model": MODEL, "input": "x", "store": False})
            assert plain.status_code == 200, plain.text  # limits: on_failure = open
            late: list[Json] = []
            second = asyncio.ensure_future(follow(late))  # opened with Redis down
            await asyncio.sleep(0.3)
            assert (await b.get(f"/v1/responses/{rid}")).json()["status"] == "in_progress"
            t0 = time.monotonic()
            cancel = await b.post(f"/v1/responses/{rid}/cancel")
            took = time.monotonic() - t0
            assert cancel.status_code == 200, cancel.text
            assert cancel.json()["id"] == rid and cancel.json()["status"] == "cancelled"
            assert took < 3, took  # a heartbeat (0.5 s) and the end stored, not the 5 s wait
            for events in await asyncio.wait_for(asyncio.gather(first, second), 15):
                end = one_terminal(events)
                assert end["type"] == "response.failed" and end["response"]["status"] == "cancelled"
                contiguous(events, 1)
            for replica in (a, b):
                assert (await replica.get(f"/v1/responses/{rid}")).json()["status"] == "cancelled"
            again = await b.post(f"/v1/responses/{rid}/cancel")  # ended: as with Redis
            assert again.status_code == 400 and again.json()["error"]["param"] == "response_id"
            await asyncio.to_thread(redis.start)  # back: the same replicas cancel across again
            again_id = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                             "background": True})).json()["id"]
            for _ in range(50):
                cancel = await b.post(f"/v1/responses/{again_id}/cancel")
                if cancel.status_code == 200:
                    break
                assert cancel.status_code == 503, cancel.text
                await asyncio.sleep(0.2)
            assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"


async def test_redis_down_a_cancel_the_owner_has_not_read_yet_answers_in_progress(
        pg: Cluster, tmp_path: Path) -> None:
    """Redis stopped, and the owner's heartbeat (8 s: its first beat comes 8 s after it
    started) later than the non-owner's wait for it (B's heartbeat + 1 s = 1.2 s): the cancel
    answers 200 with the response as it stands, ``in_progress``, the cancel recorded; the owner
    ends the run ``cancelled`` at that heartbeat, which both replicas then read.  A cancel on
    the owner itself is unchanged (at once)."""
    with redis_server() as redis:
        url = await fresh_database(pg.url)
        upstream = EndlessUpstream()
        a_config = on(url, tmp_path / "a.sqlite3", redis.url, heartbeat_seconds=8.0)
        b_config = on(url, tmp_path / "b.sqlite3", redis.url, heartbeat_seconds=0.2)
        async with in_process(endless_transport(upstream), a_config) as a:
            first_beat = time.monotonic() + 8.0
            async with in_process(Switch(answer("x")).transport(), b_config) as b:
                rid = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                            "background": True})).json()["id"]
                await asyncio.wait_for(upstream.five_sent.wait(), 5)
                await asyncio.to_thread(redis.stop)
                answered = await b.post(f"/v1/responses/{rid}/cancel")
                assert time.monotonic() < first_beat  # else this test measures nothing
                assert answered.status_code == 200, answered.text
                assert answered.json()["id"] == rid and answered.json()["status"] == "in_progress"
                assert (await a.get(f"/v1/responses/{rid}")).json()["status"] == "in_progress"
                status = "in_progress"
                for _ in range(200):  # A's first heartbeat cancels it
                    status = (await b.get(f"/v1/responses/{rid}")).json()["status"]
                    if status != "in_progress":
                        break
                    await asyncio.sleep(0.1)
                assert status == "cancelled"
                assert (await a.get(f"/v1/responses/{rid}")).json()["status"] == "cancelled"
                other = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                              "background": True})).json()["id"]
                mine = await a.post(f"/v1/responses/{other}/cancel")  # the owner: at once
                assert mine.status_code == 200 and mine.json()["status"] == "cancelled"


class Gated:
    """A fake llama.cpp whose answers stop before their last two events until ``open``."""

    def __init__(self) -> None:
        self.events = sse_events(answer("Stored at last."))
        self.gate = asyncio.Event()
        self.waiting = 0

    async def _stream(self) -> AsyncIterator[bytes]:
        for event in self.events[:-2]:
            yield event
        self.waiting += 1
        await self.gate.wait()
        for event in self.events[-2:]:
            yield event

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "GET":
                return httpx.Response(404)
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=_Body(self._stream()))
        return httpx.MockTransport(handler)


class _Body(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk


async def _runs_ending_while_down(a: httpx.AsyncClient, model: Gated, pg: Any, down: float,
                                  ) -> tuple[httpx.Response, list[Json], float, float]:
    """A non-streamed and a streamed stored response on ``a`` reach their last tokens;
    PostgreSQL stops, they end, it starts again ``down`` seconds later.  The non-streamed
    answer, the streamed events, when each was heard and when PostgreSQL was back."""
    heard: dict[str, float] = {}
    streamed: list[Json] = []

    async def plain() -> httpx.Response:
        r = await a.post("/v1/responses", json={"model": MODEL, "input": "keep this"})
        heard["plain"] = time.monotonic()
        return r

    async def stream() -> None:
        async with a.stream("POST", "/v1/responses", json={
                "model": MODEL, "input": "keep this too", "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    streamed.append(json.loads(line[6:]))
                    if streamed[-1]["type"] in ("response.completed", "response.failed"):
                        heard["stream"] = time.monotonic()

    tasks = asyncio.gather(plain(), stream())
    for _ in range(200):
        if model.waiting == 2:
            break
        await asyncio.sleep(0.02)
    assert model.waiting == 2
    await asyncio.to_thread(pg.stop)
    model.gate.set()
    await asyncio.sleep(down)
    await asyncio.to_thread(pg.start)
    back = time.monotonic()
    answered, _ = await asyncio.wait_for(tasks, 30)
    return answered, streamed, heard["plain"] - back, heard["stream"] - back


async def test_postgres_down_around_the_end_the_client_hears_it_once_it_is_stored(
        pg: Cluster, tmp_path: Path) -> None:
    """PostgreSQL stopped for 4 s as two stored runs end (one streamed): each client hears
    ``completed`` only once PostgreSQL is back and the end is stored, and both replicas read
    the responses back ``completed``, whole.  Before: the streamed client heard ``completed``
    at once, and both responses read ``failed`` / ``run_lost``, empty."""
    url = await fresh_database(pg.url)
    model = Gated()
    async with in_process(model.transport(), on(url, tmp_path / "a.sqlite3")) as a, \
            in_process(model.transport(), on(url, tmp_path / "b.sqlite3")) as b:
        answered, streamed, plain_at, stream_at = await _runs_ending_while_down(a, model, pg, 4.0)
        assert answered.status_code == 200 and answered.json()["status"] == "completed"
        end = one_terminal(streamed)
        assert end["type"] == "response.completed"
        assert plain_at >= 0 and stream_at >= 0  # heard only after the database was back
        contiguous(streamed, 0)
        for replica in (a, b):
            for rid, output in ((answered.json()["id"], answered.json()["output"]),
                                (end["response"]["id"], end["response"]["output"])):
                got = (await replica.get(f"/v1/responses/{rid}")).json()
                assert got["status"] == "completed" and got["output"] == output != []


async def test_postgres_down_past_the_bounded_wait_the_client_hears_a_store_error(
        pg: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same outage longer than the end's bounded wait (shortened to 1 s here): the
    non-streamed client gets a 503 ``store_unavailable`` with ``Retry-After``, the streamed one
    ``error`` + ``response.failed`` (``store_unavailable``), never ``completed``; the stored
    response reads ``failed`` / ``run_lost`` with a message that does not claim a process
    stopped."""
    from app.engine import run

    monkeypatch.setattr(run, "END_WAIT", 1.0, raising=False)  # old code: ~3 s
    url = await fresh_database(pg.url)
    model = Gated()
    cfg = on(url, tmp_path / "a.sqlite3", heartbeat_seconds=0.2, lost_after_seconds=0.5)
    async with in_process(model.transport(), cfg) as a:
        answered, streamed, _, _ = await _runs_ending_while_down(a, model, pg, 2.5)
        assert answered.status_code == 503, answered.text
        assert answered.json()["error"]["code"] == "store_unavailable"
        assert int(answered.headers["retry-after"]) >= 1
        kinds = [e["type"] for e in streamed]
        assert "response.completed" not in kinds and kinds[-2:] == ["error", "response.failed"]
        assert streamed[-1]["response"]["error"]["code"] == "store_unavailable"
        contiguous(streamed, 0)
        await asyncio.sleep(0.6)  # past lost_after_seconds
        got = (await a.get(f"/v1/responses/{streamed[-1]['response']['id']}")).json()
        assert got["status"] == "failed" and got["error"]["code"] == "run_lost"
        assert "could not store its end" in got["error"]["message"]


def test_owner_killed_the_follower_hears_the_stored_terminal(pg: Cluster, tmp_path: Path) -> None:
    """Replica A runs a background response (a real ``ocm-gateway serve`` process) that a
    client follows through replica B from Redis; A is killed with -9.  B's stream ends with
    ``response.failed`` / ``run_lost`` soon after A's heartbeat goes stale (it ended at 30 s
    with no terminal event), and B reads the response the same way."""
    endless = LoopbackUpstream(interval=0.02)
    with redis_server() as redis, endless.running() as endless_url:
        def conf(name: str) -> Path:
            path = tmp_path / f"{name}.toml"
            path.write_text(f'[store]\npath = "{tmp_path / name}.sqlite3"\nurl = "{pg.url}"\n'
                            f'heartbeat_seconds = 0.2\nlost_after_seconds = 1.0\n'
                            f'[redis]\nurl = "{redis.url}"\n'
                            f'[models.endless]\nbase_urls = ["{endless_url}"]\n')
            return path

        with run_gateway(conf("a")) as a, run_gateway(conf("b")) as b:
            rid = httpx.post(f"{a.url}/v1/responses", json={"model": "endless", "input": "hi",
                                                             "background": True}, timeout=30).json()["id"]
            events: list[Json] = []
            with httpx.stream("GET", f"{b.url}/v1/responses/{rid}", timeout=60,
                              params={"stream": "true", "starting_after": "0"}) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                for line in lines:
                    if line.startswith("data: ") and line != "data: [DONE]":
                        events.append(json.loads(line[6:]))
                    if len(events) == 5:
                        break
                crash(a.process)  # the workers too: with N of them, serve alone is not a crash
                killed = time.monotonic()
                for line in lines:
                    if line.startswith("data: ") and line != "data: [DONE]":
                        events.append(json.loads(line[6:]))
                took = time.monotonic() - killed
            end = one_terminal(events)
            assert end["type"] == "response.failed" and end["response"]["error"]["code"] == "run_lost"
            contiguous(events, 1)
            assert took < 6, took
            got = httpx.get(f"{b.url}/v1/responses/{rid}", timeout=5).json()
            assert got["status"] == "failed" and got["error"]["code"] == "run_lost"


@pytest.mark.parametrize("owner_beat", [0.5, 8.0], ids=["owner-reads-it-at-once", "owner-reads-it-later"])
async def test_redis_down_a_delete_on_another_replica_degrades_as_a_cancel(
        pg: Cluster, tmp_path: Path, owner_beat: float) -> None:
    """Redis stopped, ``DELETE`` of A's running background response on B: the cancel goes to A
    through the store (was a 503 ``signals_unavailable`` with nothing cancelled).  A reads it
    within B's wait (heartbeat 0.5 s): 200 deleted, 404 on both replicas for good.  A reads it
    later (heartbeat 8 s): 503 ``server_overloaded`` with ``Retry-After`` in OpenAI's envelope,
    nothing deleted, the cancel recorded; A ends the run ``cancelled`` at its heartbeat, and the
    retried delete is a 200 that the end, stored before it, cannot undo."""
    with redis_server() as redis:
        url = await fresh_database(pg.url)
        upstream = EndlessUpstream()
        a_config = on(url, tmp_path / "a.sqlite3", redis.url, heartbeat_seconds=owner_beat)
        b_config = on(url, tmp_path / "b.sqlite3", redis.url, heartbeat_seconds=0.2)
        async with in_process(endless_transport(upstream), a_config) as a, \
                in_process(Switch(answer("x")).transport(), b_config) as b:
            started = time.monotonic()
            rid = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                        "background": True})).json()["id"]
            await asyncio.wait_for(upstream.five_sent.wait(), 5)
            await asyncio.to_thread(redis.stop)
            deleted = await b.delete(f"/v1/responses/{rid}")
            if owner_beat < 1:
                assert deleted.status_code == 200, deleted.text
                assert deleted.json() == {"id": rid, "object": "response.deleted", "deleted": True}
            else:
                assert time.monotonic() < started + owner_beat  # else this measures nothing
                assert deleted.status_code == 503, deleted.text
                error = deleted.json()["error"]
                assert (error["type"], error["code"]) == ("server_error", "server_overloaded")
                assert "retry the delete" in error["message"]
                assert float(deleted.headers["retry-after"]) >= 1
                assert (await a.get(f"/v1/responses/{rid}")).json()["status"] == "in_progress"
                status = "in_progress"
                for _ in range(200):  # A's first heartbeat reads the recorded cancel
                    status = (await b.get(f"/v1/responses/{rid}")).json()["status"]
                    if status != "in_progress":
                        break
                    await asyncio.sleep(0.1)
                assert status == "cancelled"
                again = await b.delete(f"/v1/responses/{rid}")
                assert again.status_code == 200, again.text
            await asyncio.sleep(1.0)  # a heartbeat of A's later: nothing brings it back
            for replica in (a, b):
                gone = await replica.get(f"/v1/responses/{rid}")
                assert gone.status_code == 404, gone.text
