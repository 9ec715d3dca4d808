"""The console's live views with ``serve --workers N`` (app/api/admin/live.py): two gateways in
this process stand for two workers, each connected to one metrics relay (as ``serve`` sets
``OCMGW_METRICS_SOCKET``).  ``/admin/errors`` asked of either lists both workers' errors, newest
first, bounded by ``limit``; ``/admin/models`` sums in flight and admission and shows a replica
cooling on the other worker; a silent worker is left out within the deadline; with one worker
(no relay) the answers are this process's, as before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from app.api.admin.live import FIELD_CHARS, error_rows, merge_errors
from app.http.machine_metrics import METRICS_ENV, listen
from tests.support.gateway import gateway
from tests.support.wire import Replay
from tests.unit.api.admin.test_keys import ADMIN_H, admin_config, bearer

pytestmark = pytest.mark.timeout(60)
Pair = tuple[httpx.AsyncClient, httpx.AsyncClient]


@pytest.fixture
async def two_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                      ) -> AsyncIterator[Pair]:
    path = tmp_path / "metrics.sock"
    server, _ = await listen(str(path))
    monkeypatch.setenv(METRICS_ENV, str(path))
    try:
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(gateway(Replay("03a_completion_tokenids_stream").transport(),
                                                        admin_config()))
            b = await stack.enter_async_context(gateway(Replay("03a_completion_tokenids_stream").transport(),
                                                        admin_config()))
            for _ in range(300):  # both connected to the relay
                body = (await a.get("/admin/errors", headers=ADMIN_H)).json()
                if body["workers"] == {"answered": 2, "connected": 2}:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the two workers did not both connect to the relay")
            yield a, b
    finally:
        server.close()


def _app(client: httpx.AsyncClient) -> object:
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app


async def test_errors_of_both_workers_show_on_either(two_workers: Pair) -> None:
    a, b = two_workers
    assert (await a.get("/v1/models", headers=bearer("wrong-on-a"))).status_code == 401
    await asyncio.sleep(0.01)
    assert (await b.get("/v1/models", headers=bearer("wrong-on-b"))).status_code == 401
    await asyncio.sleep(0.01)
    assert (await a.get("/admin/keys/key_nope", headers=ADMIN_H)).status_code == 404
    for asker in (a, b):
        body = (await asker.get("/admin/errors", headers=ADMIN_H)).json()
        assert body["workers"] == {"answered": 2, "connected": 2}
        rows = [(r["path"], r["code"]) for r in body["data"]]
        assert rows == [("/admin/keys/key_nope", "not_found"), ("/v1/models", "invalid_api_key"),
                        ("/v1/models", "invalid_api_key")], rows
        times = [r["time"] for r in body["data"]]
        assert times == sorted(times, reverse=True)
    # limit keeps the newest of the machine, whichever worker holds them
    body = (await b.get("/admin/errors", headers=ADMIN_H, params={"limit": 1})).json()
    assert [r["path"] for r in body["data"]] == ["/admin/keys/key_nope"]
    assert (await b.get("/admin/errors", headers=ADMIN_H, params={"limit": 0})).status_code == 400


async def test_models_add_up_both_workers(two_workers: Pair) -> None:
    a, b = two_workers
    app_a, app_b = _app(a), _app(b)
    replica_a = app_a.state.registry.routes["gpt-oss-test"].backend.pool.replicas[0]  # type: ignore[attr-defined]
    replica_b = app_b.state.registry.routes["gpt-oss-test"].backend.pool.replicas[0]  # type: ignore[attr-defined]
    replica_a.outstanding, replica_b.outstanding = 2, 3
    replica_b.cooldown_until = time.monotonic() + 30  # cooling on b only
    app_a.state.registry.admission.inflight = 4  # type: ignore[attr-defined]
    app_b.state.registry.admission.inflight = 1  # type: ignore[attr-defined]
    try:
        for asker in (a, b):
            body = (await asker.get("/admin/models", headers=ADMIN_H)).json()
            [model] = body["data"]
            [replica] = model["replicas"]
            assert replica["in_flight"] == 5
            assert not replica["healthy"] and 25 < replica["cooldown_seconds"] <= 30
            assert body["admission"] == {"in_flight": 5, "queued": 0}
            assert body["workers"] == {"answered": 2, "connected": 2}
    finally:
        replica_a.outstanding = replica_b.outstanding = 0
        replica_b.cooldown_until = 0.0
        app_a.state.registry.admission.inflight = app_b.state.registry.admission.inflight = 0  # type: ignore[attr-defined]


async def test_a_silent_worker_is_left_out_within_the_deadline(two_workers: Pair) -> None:
    a, b = two_workers
    assert (await b.get("/v1/models", headers=bearer("wrong-on-b"))).status_code == 401
    link = await _app(b).state.machine_metrics.link()  # type: ignore[attr-defined]
    link.transport.pause_reading()
    try:
        t0 = time.monotonic()
        body = (await a.get("/admin/errors", headers=ADMIN_H)).json()
        assert time.monotonic() - t0 < 1.5
        assert body["data"] == [] and body["workers"] == {"answered": 1, "connected": 2}
    finally:
        link.transport.resume_reading()


async def test_one_worker_reads_its_own_state() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
        assert (await c.get("/v1/models", headers=bearer("wrong"))).status_code == 401
        body = (await c.get("/admin/errors", headers=ADMIN_H)).json()
        assert "workers" not in body and [r["code"] for r in body["data"]] == ["invalid_api_key"]
        body = (await c.get("/admin/models", headers=ADMIN_H)).json()
        assert "workers" not in body and body["data"][0]["replicas"][0]["healthy"]


def test_error_rows_are_bounded_and_merged_newest_first() -> None:
    rows = error_rows([{"time": 2.0, "message": "x" * 10_000, "status": 500},
                       {"time": 1.0, "message": "short", "status": 400}])
    assert len(rows[0]["message"]) == FIELD_CHARS and rows[1]["message"] == "short"
    other = [{"time": 3.0, "status": 401}, {"time": 0.5, "status": 404}]
    assert [r["time"] for r in merge_errors([*rows, *other], 3)] == [3.0, 2.0, 1.0]
