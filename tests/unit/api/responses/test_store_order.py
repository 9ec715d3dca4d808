"""The order of a stored response's writes against what its client hears, end to end through
:meth:`ResponsesService.create` (the path the route streams from), on the SQLite and the
PostgreSQL store behind a store whose writes can be held or failed:

* a stream's start is committed before ``create`` hands back the run, hence before its first
  event (a held start: no run, no event);
* its terminal event comes only once its end is committed (a held end: the client waits);
* an end that cannot be stored ends the stream with one ``response.failed``
  (``store_unavailable``), never ``completed``;
* a run whose upstream refuses leaves no stored response, whichever the mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from app.api.responses.service import ResponsesService
from app.core.access import ANONYMOUS
from app.core.errors import GatewayError
from app.engine import run as run_module
from app.main import create_app
from app.stores.base import ResponseStore
from schemas.responses import CreateResponseBody
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config
from tests.support.postgres import fresh_database, postgres_server
from tests.unit.api.responses.test_routes import REASONING

Json = dict[str, Any]
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")


class HeldStore:
    """The real store, with each ``put`` recorded and held until its gate opens (gates are
    taken in order: the first put waits for ``gates[0]``, ...); from put ``fail_from`` on,
    each raises instead of writing."""

    def __init__(self, inner: ResponseStore, held: int = 0) -> None:
        self.inner = inner
        self.gates = [asyncio.Event() for _ in range(held)]
        self.entered: list[Json] = []
        self.done: list[str] = []
        self.fail_from: int | None = None

    async def put(self, resource: Json, input_items: list[Json], owner: str) -> None:
        index = len(self.entered)
        self.entered.append(resource)
        if index < len(self.gates):
            await self.gates[index].wait()
        if self.fail_from is not None and index >= self.fail_from:
            raise OSError("disk gone")
        await self.inner.put(resource, input_items, owner)
        self.done.append(str(resource["status"]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Upstream:
    """A fake llama.cpp that records when it was asked (and answers ``status``)."""

    def __init__(self, status: int = 200) -> None:
        self.fake = FakeLlamaCpp(REASONING)
        self.status = status
        self.asked = asyncio.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":  # the slots it is polled for
            return httpx.Response(200, json=[])
        self.asked.set()
        if self.status != 200:
            return httpx.Response(self.status, json={"error": {"message": "no", "code": 400}})
        return self.fake(request)


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest) -> str | None:
    """None: the SQLite store; else a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        return None
    return await fresh_database(request.getfixturevalue("postgres"))


@asynccontextmanager
async def service(upstream: Upstream, wrap: Callable[[ResponseStore], HeldStore], url: str | None = None,
                  ) -> AsyncIterator[tuple[ResponsesService, HeldStore]]:
    cfg = config()
    if url is not None:
        cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"url": url})})
    app = create_app(cfg, transport=httpx.MockTransport(upstream))
    async with app.router.lifespan_context(app):
        responses: ResponsesService = app.state.responses
        held = wrap(responses.store)
        responses.store = held
        yield responses, held


def body(stream: bool = True) -> CreateResponseBody:
    return CreateResponseBody.model_validate({"model": MODEL, "input": "hi", "stream": stream})


async def stored_status(store: HeldStore, response_id: str) -> str | None:
    found = await store.inner.get(response_id, ANONYMOUS.tenant)
    return None if found is None else str(found.resource["status"])


async def test_a_streams_start_is_committed_before_any_event(store_url: str | None) -> None:
    upstream = Upstream()
    async with service(upstream, lambda inner: HeldStore(inner, held=2), store_url) as (responses, store):
        creating = asyncio.ensure_future(responses.create(body()))
        for _ in range(250):
            if store.entered:
                break
            await asyncio.sleep(0.02)
        assert [r["status"] for r in store.entered] == ["in_progress"] and store.done == []
        await asyncio.sleep(0.05)
        assert not creating.done()  # no run, so no event, before the start is committed
        rid = str(store.entered[0]["id"])
        assert await stored_status(store, rid) is None
        store.gates[0].set()
        run = await asyncio.wait_for(creating, 5)
        assert await stored_status(store, rid) == "in_progress"  # before the first event is read
        store.gates[1].set()  # (the end was held so that it could not have replaced it yet)
        heard = [payload async for payload in run.frames()]
        assert heard[0]["type"] == "response.created" and heard[-1]["type"] == "response.completed"
        assert await stored_status(store, rid) == "completed"
        assert store.done == ["in_progress", "completed"]


async def test_a_streams_terminal_waits_for_its_end_to_be_committed() -> None:
    upstream = Upstream()

    def wrap(inner: ResponseStore) -> HeldStore:
        store = HeldStore(inner, held=2)
        store.gates[0].set()  # the start goes through; the end is held
        return store

    async with service(upstream, wrap) as (responses, store):
        run = await responses.create(body())
        heard: list[Json] = []

        async def listen() -> None:
            async for payload in run.frames():
                heard.append(payload)

        listening = asyncio.ensure_future(listen())
        for _ in range(250):
            if len(store.entered) == 2:
                break
            await asyncio.sleep(0.02)
        assert [r["status"] for r in store.entered] == ["in_progress", "completed"]
        await asyncio.sleep(0.1)
        types = [p["type"] for p in heard]
        assert "response.output_text.delta" in types  # the answer was heard ...
        assert not any(t in TERMINAL for t in types) and not listening.done()  # ... not its end
        rid = str(store.entered[0]["id"])
        assert await stored_status(store, rid) == "in_progress"
        store.gates[1].set()
        await asyncio.wait_for(listening, 5)
        assert heard[-1]["type"] == "response.completed"
        assert await stored_status(store, rid) == "completed"


async def test_an_end_that_cannot_be_stored_is_one_failed_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "END_WAIT", 0.3)

    def wrap(inner: ResponseStore) -> HeldStore:
        store = HeldStore(inner)
        store.fail_from = 1  # the start is written, every write of the end fails
        return store

    async with service(Upstream(), wrap) as (responses, store):
        run = await responses.create(body())
        heard = [payload async for payload in run.frames()]
        types = [p["type"] for p in heard]
        assert [t for t in types if t in TERMINAL] == ["response.failed"]
        assert types.count("error") == 1 and types[-1] == "response.failed"
        assert heard[-1]["response"]["error"]["code"] == "store_unavailable"
        assert [p["sequence_number"] for p in heard] == list(range(len(heard)))
        assert len(store.entered) >= 3  # the end was retried before giving up
        assert await stored_status(store, str(store.entered[0]["id"])) == "in_progress"


@pytest.mark.parametrize("stream", [True, False])
async def test_an_upstream_that_refuses_leaves_no_stored_response(stream: bool,
                                                                  store_url: str | None) -> None:
    upstream = Upstream(status=400)
    async with service(upstream, lambda inner: HeldStore(inner), store_url) as (responses, store):
        with pytest.raises(GatewayError):
            await responses.create(body(stream))
        assert upstream.asked.is_set()
        await asyncio.sleep(0.1)  # anything written in the background would be there by now
        assert type(store.inner).__name__.startswith("Postgres" if store_url else "Sqlite")
        assert await store.inner.page(ANONYMOUS.tenant, limit=10, after=None, ascending=True) == []
        assert store.done == []
