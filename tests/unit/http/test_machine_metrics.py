"""The machine's /metrics relay (app/http/machine_metrics.py, its service side
app/http/metrics_relay.py): a relay on a Unix socket and, in
this process, workers standing for ``serve --workers N``'s (each its own registry and its own
connection): a scrape of any one shows every worker's counts; a worker that does not answer is
left out of ``ocm_workers_reporting`` within the deadline, its counters kept and its gauges not;
a worker gone leaves its counters (never backwards) and no gauge; the relay away, a scrape shows
the worker alone, at once; a malformed line closes only its own connection."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.http.machine_metrics import MachineMetrics
from app.http.metrics_relay import listen
from app.metrics import Metrics

pytestmark = pytest.mark.timeout(60)


def values(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode())
            for s in family.samples}


def requests(text: bytes, status: str = "200") -> float:
    key = ("ocm_requests_total", (("model", "m"), ("route", "/v1/x"), ("status", status)))
    return values(text).get(key, 0.0)


def gauge(text: bytes, name: str) -> float | None:
    return values(text).get((name, ()))


class Worker:
    def __init__(self, path: Path, deadline: float = 0.5) -> None:
        self.metrics = Metrics()
        self.machine = MachineMetrics(str(path), self.metrics.registry, deadline=deadline)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Worker:
        self.task = asyncio.get_running_loop().create_task(self.machine.run())
        await self.machine.link()
        return self

    def serve(self, n: int, status: str = "200") -> None:
        for _ in range(n):
            self.metrics.requests.labels("/v1/x", "m", status).inc()
            self.metrics.ttft.labels("m").observe(0.02)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.machine.close()


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "metrics.sock"
    server, _ = await listen(str(path))
    yield path
    server.close()


@contextlib.asynccontextmanager
async def two_workers(relay: Path, deadline: float = 0.5) -> AsyncIterator[tuple[Worker, Worker]]:
    """Two workers connected to the relay (the first's scrapes waiting ``deadline``), stopped
    afterwards."""
    a, b = await Worker(relay, deadline=deadline).start(), await Worker(relay).start()
    try:
        await connected(a, 2)
        yield a, b
    finally:
        a.stop()
        b.stop()


async def connected(worker: Worker, count: int) -> None:
    for _ in range(200):
        if gauge(await worker.machine.render(), "ocm_workers") == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not {count} workers")


async def test_a_scrape_of_either_worker_shows_both(relay: Path) -> None:
    async with two_workers(relay) as (a, b):
        a.serve(3)
        b.serve(4)
        b.serve(2, "429")
        a.metrics.open_streams.inc(2)
        b.metrics.open_streams.inc(1)
        for worker in (a, b):
            text = await worker.machine.render()
            assert requests(text) == 7 and requests(text, "429") == 2
            got = values(text)
            assert got[("ocm_time_to_first_token_seconds_count", (("model", "m"),))] == 9
            assert got[("ocm_time_to_first_token_seconds_bucket", (("le", "0.025"), ("model", "m")))] == 9
            assert got[("ocm_time_to_first_token_seconds_bucket", (("le", "0.01"), ("model", "m")))] == 0
            assert gauge(text, "ocm_open_streams") == 3  # gauges: the machine's total
            assert gauge(text, "ocm_workers") == 2 and gauge(text, "ocm_workers_reporting") == 2


async def test_a_silent_worker_is_left_out_within_the_deadline(relay: Path) -> None:
    async with two_workers(relay, deadline=0.3) as (a, b):
        b.serve(5)
        b.metrics.open_streams.inc(4)
        assert requests(await a.machine.render()) == 5  # the relay now has b's snapshot
        b.serve(1)
        link = await b.machine.link()
        assert link.transport is not None
        link.transport.pause_reading()  # b stops answering (a worker stuck on its event loop)
        t0 = time.monotonic()
        text = await a.machine.render()
        assert time.monotonic() - t0 < 1.0
        assert gauge(text, "ocm_workers") == 2 and gauge(text, "ocm_workers_reporting") == 1
        assert requests(text) == 5  # b's counters as last heard: never backwards
        assert gauge(text, "ocm_open_streams") == 0  # b's gauges: unknown now, left out
        link.transport.resume_reading()
        await asyncio.sleep(0.05)
        text = await a.machine.render()
        assert requests(text) == 6 and gauge(text, "ocm_workers_reporting") == 2


async def test_a_worker_gone_keeps_its_counters_and_no_gauge(relay: Path) -> None:
    async with two_workers(relay) as (a, b):
        a.serve(1)
        b.serve(3)
        b.metrics.open_streams.inc(2)
        assert requests(await a.machine.render()) == 4
        b.serve(2)  # counted after the last scrape: sent in b's final snapshot
        b.stop()
        await connected(a, 1)
        text = await a.machine.render()
        assert requests(text) == 6 and gauge(text, "ocm_open_streams") == 0
        assert gauge(text, "ocm_workers_reporting") == 1
        c = await Worker(relay).start()  # b's replacement starts from zero
        try:
            await connected(a, 2)
            c.serve(1)
            assert requests(await c.machine.render()) == 7
        finally:
            c.stop()


async def test_a_worker_killed_without_a_final_snapshot_keeps_what_was_scraped(relay: Path) -> None:
    async with two_workers(relay) as (a, b):
        b.serve(3)
        assert requests(await a.machine.render()) == 3
        b.serve(1)  # never scraped: lost with b
        link = await b.machine.link()
        assert b.task is not None
        b.task.cancel()
        link.close()  # the connection closes as a killed process's would, no final snapshot
        await connected(a, 1)
        assert requests(await a.machine.render()) == 3


async def test_a_worker_lost_during_a_scrape_is_counted_in_it(relay: Path) -> None:
    async with two_workers(relay, deadline=2.0) as (a, b):
        a.serve(1)
        b.serve(3)
        assert requests(await a.machine.render()) == 4
        link = await b.machine.link()
        assert link.transport is not None and b.task is not None
        link.transport.pause_reading()  # b does not answer the next scrape...
        scrape = asyncio.get_running_loop().create_task(a.machine.render())
        await asyncio.sleep(0.1)
        b.task.cancel()
        link.close()  # ...and is killed while the relay waits for it
        t0 = time.monotonic()
        text = await scrape
        assert time.monotonic() - t0 < 1.0  # answered when b went, not at the deadline
        assert requests(text) == 4


async def test_without_the_relay_a_scrape_is_this_worker_alone_at_once(tmp_path: Path) -> None:
    alone = Worker(tmp_path / "nobody.sock")
    alone.serve(2)
    t0 = time.monotonic()
    text = await alone.machine.render()
    assert time.monotonic() - t0 < 1.5
    assert requests(text) == 2
    assert gauge(text, "ocm_workers") == 0 and gauge(text, "ocm_workers_reporting") == 1


async def test_a_view_lists_every_workers_rows(relay: Path) -> None:
    """The console's runs in flight: each worker's rows, gathered by whichever is asked."""
    async with two_workers(relay, deadline=0.3) as (a, b):
        a.machine.views["runs"] = lambda: [{"id": "resp_a"}]
        b.machine.views["runs"] = lambda: [{"id": "resp_b1"}, {"id": "resp_b2"}]
        for asker in (a, b):
            rows, answered, connected_workers = await asker.machine.view("runs")
            assert sorted(r["id"] for r in rows) == ["resp_a", "resp_b1", "resp_b2"]
            assert (answered, connected_workers) == (2, 2)
        assert await a.machine.view("nothing") == ([], 2, 2)
        link = await b.machine.link()
        assert link.transport is not None
        link.transport.pause_reading()  # b silent: a's own rows, within the deadline
        t0 = time.monotonic()
        assert await a.machine.view("runs") == ([{"id": "resp_a"}], 1, 2)
        assert time.monotonic() - t0 < 1.0
        link.transport.resume_reading()


async def test_a_malformed_line_closes_only_that_connection(relay: Path) -> None:
    async with two_workers(relay) as (a, b):
        for bad in (b"not json\n", b'["g", "x", 1, []]\n', b'["nope"]\n', b"[]\n"):
            reader, writer = await asyncio.open_unix_connection(str(relay))
            writer.write(bad)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the relay
            writer.close()
        b.serve(2)
        await connected(a, 2)
        assert requests(await a.machine.render()) == 2
