"""Workers on one SQLite file without Redis (``serve --workers N``): a cancel that lands on the
worker that does not run the response is recorded in the store, and the owner's heartbeat
ends the run, as between replicas when Redis is down.  Two gateway processes on one file are
the two workers here: a worker is nothing more (same config, same file, no shared memory)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from app.config import GatewayConfig
from tests.support.gateway import MODEL, config
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.ws import served


@contextlib.asynccontextmanager
async def worker(upstream: httpx.AsyncBaseTransport, cfg: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with served(upstream, cfg) as host, \
            httpx.AsyncClient(base_url=f"http://{host}", timeout=60) as client:
        yield client


def on_file(path: Path, heartbeat: float) -> Any:
    c = config(store_path=str(path))
    return c.model_copy(update={"store": c.store.model_copy(update={"heartbeat_seconds": heartbeat})})


async def test_a_cancel_on_the_other_worker_stops_the_run(tmp_path: Path) -> None:
    """Was a 400 "not in progress" for a response that was running; now 200 ``cancelled``
    within a heartbeat (0.5 s here), the owner's upstream stream closed, both workers read
    ``cancelled``, and a second cancel is the usual 400 (it has ended)."""
    db = tmp_path / "responses.sqlite3"
    upstream = EndlessUpstream()
    idle = EndlessUpstream()
    async with worker(endless_transport(upstream), on_file(db, 0.5)) as a, \
            worker(endless_transport(idle), on_file(db, 0.5)) as b:
        created = await a.post("/v1/responses", json={"model": MODEL, "input": "go", "background": True})
        assert created.status_code == 200, created.text
        rid = created.json()["id"]
        await asyncio.wait_for(upstream.five_sent.wait(), 5)
        assert (await b.get(f"/v1/responses/{rid}")).json()["status"] == "in_progress"
        t0 = time.monotonic()
        cancel = await b.post(f"/v1/responses/{rid}/cancel")
        took = time.monotonic() - t0
        assert cancel.status_code == 200, cancel.text
        assert cancel.json()["id"] == rid and cancel.json()["status"] == "cancelled"
        assert took < 3, took  # the owner's heartbeat read it, not the bounded wait running out
        assert upstream.closed_at is not None  # the owner's upstream request was closed
        for each in (a, b):
            assert (await each.get(f"/v1/responses/{rid}")).json()["status"] == "cancelled"
        again = await b.post(f"/v1/responses/{rid}/cancel")
        assert again.status_code == 400 and again.json()["error"]["param"] == "response_id"
        assert idle.sent == 0  # B never ran it


async def test_another_tenants_cancel_is_a_404_and_records_nothing(tmp_path: Path) -> None:
    """The store-recorded cancel is per owner: a key that does not own the response gets a 404
    on the other worker and the run goes on."""
    db = tmp_path / "responses.sqlite3"
    upstream = EndlessUpstream()
    keyed = on_file(db, 0.5).model_dump()
    keyed["auth"] = {"keys": [{"name": name, "sha256": hashlib.sha256(name.encode()).hexdigest()}
                              for name in ("alice", "bob")]}
    keyed = GatewayConfig.model_validate(keyed)
    async with worker(endless_transport(upstream), keyed) as a, \
            worker(endless_transport(EndlessUpstream()), keyed) as b:
        rid = (await a.post("/v1/responses", json={"model": MODEL, "input": "go", "background": True},
                            headers={"authorization": "Bearer alice"})).json()["id"]
        await asyncio.wait_for(upstream.five_sent.wait(), 5)
        other = await b.post(f"/v1/responses/{rid}/cancel", headers={"authorization": "Bearer bob"})
        assert other.status_code == 404, other.text
        await asyncio.sleep(1.2)  # two of the owner's heartbeats
        assert upstream.closed_at is None
        own = await b.post(f"/v1/responses/{rid}/cancel", headers={"authorization": "Bearer alice"})
        assert own.status_code == 200 and own.json()["status"] == "cancelled", own.text


async def test_a_delete_on_the_other_worker_ends_the_run_first(tmp_path: Path) -> None:
    """Was deleted at once while the owner ran on (its end, stored later, brought the response
    back); now the run is cancelled through the store first and the delete then holds."""
    db = tmp_path / "responses.sqlite3"
    upstream = EndlessUpstream()
    async with worker(endless_transport(upstream), on_file(db, 0.5)) as a, \
            worker(endless_transport(EndlessUpstream()), on_file(db, 0.5)) as b:
        rid = (await a.post("/v1/responses", json={"model": MODEL, "input": "go",
                                                    "background": True})).json()["id"]
        await asyncio.wait_for(upstream.five_sent.wait(), 5)
        deleted = await b.delete(f"/v1/responses/{rid}")
        assert deleted.status_code == 200, deleted.text
        assert upstream.closed_at is not None
        await asyncio.sleep(1.2)  # past the owner's next heartbeats: nothing brings it back
        for each in (a, b):
            assert (await each.get(f"/v1/responses/{rid}")).status_code == 404

