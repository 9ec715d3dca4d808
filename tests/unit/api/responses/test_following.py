"""A cancel of a response another replica runs (app/api/responses/following.py
``cancel_elsewhere``) and the owner's side of it (``ResponsesService.heartbeat``): with Redis
the signal is published and the owner's stored end answered; with Redis down the cancel is
recorded in the store, the owner's heartbeat reads it and ends the run, and the caller gets
the response as it stands after a bounded wait (``cancelled``, or ``in_progress`` with the
cancel recorded).  Without a way to record it (delete), Redis down stays a 503."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.api.responses.following import cancel_elsewhere
from app.engine.signals import RemoteReader, Settle, SignalsUnavailable
from app.main import create_app
from app.stores.base import StoredResponse
from app.stores.memory import MemoryResponseStore
from tests.support.gateway import MODEL, config
from tests.support.slow_upstream import EndlessUpstream

Json = dict[str, Any]


class Signals:
    """Redis as seen by the cancelling replica: ``up`` publishes (and calls the owner's
    listener), down raises as :class:`~app.engine.signals.RedisSignals` does."""

    shared = True

    def __init__(self, up: bool, on_cancel: Callable[[str], None] | None = None) -> None:
        self.up = up
        self.published: list[str] = []
        self._on_cancel = on_cancel

    async def cancel(self, run_id: str) -> None:
        if not self.up:
            raise SignalsUnavailable("Redis is unavailable (ConnectionError); try again.")
        self.published.append(run_id)
        if self._on_cancel is not None:
            self._on_cancel(run_id)

    def follow(self, run_id: str, after: int | None, settle: Settle) -> RemoteReader:
        raise AssertionError("not followed here")

    async def listen(self, on_cancel: Callable[[str], None],
                     on_cooldown: Callable[[str, float], None] | None = None) -> None:
        await asyncio.Event().wait()


def running(rid: str = "resp_1") -> Json:
    return {"id": rid, "object": "response", "created_at": 1, "status": "in_progress", "output": []}


async def owner_heartbeat(store: MemoryResponseStore, rid: str, beats: int) -> None:
    """The owning replica's heartbeat: every beat it touches its run and, if a cancel is
    recorded for it, stores the run's end ``cancelled``."""
    for _ in range(beats):
        await asyncio.sleep(0.02)
        if rid in await store.touch([rid]):
            await store.put({**running(rid), "status": "cancelled"}, [], "alice")
            return


def reader(store: MemoryResponseStore, rid: str = "resp_1") -> Callable[[], Any]:
    async def read() -> StoredResponse:
        got = await store.get(rid, "alice")
        assert got is not None
        return got
    return read


async def test_redis_down_the_cancel_is_recorded_and_the_owner_acts_at_its_heartbeat() -> None:
    store = MemoryResponseStore()
    await store.put(running(), [], "alice")
    owner = asyncio.ensure_future(owner_heartbeat(store, "resp_1", beats=500))
    answered = await cancel_elsewhere(Signals(up=False), "resp_1", reader(store),
                                      lambda: store.request_cancel("resp_1", "alice"), record_wait=30)
    await owner
    assert answered["status"] == "cancelled"


async def test_redis_down_an_owner_that_does_not_act_in_time_leaves_the_response_as_it_stands() -> None:
    store = MemoryResponseStore()
    await store.put(running(), [], "alice")
    answered = await cancel_elsewhere(Signals(up=False), "resp_1", reader(store),
                                      lambda: store.request_cancel("resp_1", "alice"), record_wait=0.3)
    assert answered["status"] == "in_progress" and answered["id"] == "resp_1"
    assert await store.touch(["resp_1"]) == {"resp_1"}  # recorded: the owner's next beat ends it


async def test_redis_down_a_run_that_ended_meanwhile_answers_its_end() -> None:
    store = MemoryResponseStore()
    await store.put({**running(), "status": "completed"}, [], "alice")  # ended as we asked
    answered = await cancel_elsewhere(Signals(up=False), "resp_1", reader(store),
                                      lambda: store.request_cancel("resp_1", "alice"), record_wait=30)
    assert answered["status"] == "completed"
    assert await store.touch(["resp_1"]) == set()


async def test_redis_down_without_a_record_is_a_503_as_before() -> None:
    store = MemoryResponseStore()
    await store.put(running(), [], "alice")
    with pytest.raises(SignalsUnavailable) as failure:
        await cancel_elsewhere(Signals(up=False), "resp_1", reader(store))
    assert failure.value.status == 503 and failure.value.code == "signals_unavailable"
    assert await store.touch(["resp_1"]) == set()


async def test_redis_up_the_signal_is_published_and_nothing_is_recorded() -> None:
    store = MemoryResponseStore()
    await store.put(running(), [], "alice")
    ended: list[asyncio.Task[None]] = []

    def on_cancel(rid: str) -> None:  # the owner's listener: it stores the end
        if not ended:
            ended.append(asyncio.ensure_future(store.put({**running(rid), "status": "cancelled"},
                                                         [], "alice")))

    signals = Signals(up=True, on_cancel=on_cancel)
    answered = await cancel_elsewhere(signals, "resp_1", reader(store),
                                      lambda: store.request_cancel("resp_1", "alice"))
    assert answered["status"] == "cancelled" and signals.published[0] == "resp_1"
    assert await store.touch(["resp_1"]) == set()  # the fast path writes no flag


async def test_the_owners_heartbeat_cancels_a_run_whose_cancel_is_recorded() -> None:
    """A real gateway's heartbeat (every 50 ms here): a cancel recorded in its store by another
    replica ends its background run ``cancelled``; its other runs go on."""
    cfg = config()
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"heartbeat_seconds": 0.05})})
    upstreams: list[EndlessUpstream] = []

    def handler(request: httpx.Request) -> httpx.Response:  # each generation: its own, endless
        if request.method == "GET":
            return httpx.Response(404)
        upstreams.append(EndlessUpstream())
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=upstreams[-1])

    app = create_app(cfg, transport=httpx.MockTransport(handler))
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        body = {"model": MODEL, "input": "go", "background": True}
        rid = (await client.post("/v1/responses", json=body)).json()["id"]
        keep = (await client.post("/v1/responses", json=body)).json()["id"]
        for _ in range(400):
            if len(upstreams) == 2:
                break
            await asyncio.sleep(0.025)
        await asyncio.wait_for(asyncio.gather(*(u.five_sent.wait() for u in upstreams)), 10)
        assert await app.state.responses.store.request_cancel(rid, "")  # as another replica does
        status = "in_progress"
        for _ in range(400):
            status = (await client.get(f"/v1/responses/{rid}")).json()["status"]
            if status != "in_progress":
                break
            await asyncio.sleep(0.025)
        assert status == "cancelled"
        assert (await client.get(f"/v1/responses/{keep}")).json()["status"] == "in_progress"
        assert (await client.post(f"/v1/responses/{keep}/cancel")).json()["status"] == "cancelled"
