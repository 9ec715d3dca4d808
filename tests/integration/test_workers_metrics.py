"""``ocm-gateway serve --workers 2`` as a subprocess: ``/metrics`` scraped from either worker shows
the whole machine (app/http/machine_metrics.py: a relay in the machine service's process).
Requests are sent on connections whose worker is known from /proc
(tests/integration/test_workers_limits.py), some to each worker; a worker killed, a scrape still
answers at once and the machine's counters do not go backwards."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import serve_workers
from tests.integration.test_workers_limits import pinned, worker_of, workers
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import Running
from tests.support.redis_server import redis_server
from tests.support.wire import load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-metrics")
    with LoopbackUpstream(mode="final", events=FINAL).running() as final:
        config = tmp / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n'
                          f'[models.final]\nbase_urls = ["{final}"]\n')
        with serve_workers(config) as running:
            yield running


@pytest.fixture(scope="module")
def redis_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """Two workers of one replica with Redis between replicas (Redis counts and signals)."""
    tmp = tmp_path_factory.mktemp("workers-metrics-redis")
    with LoopbackUpstream(mode="final", events=FINAL).running() as final, redis_server() as redis:
        config = tmp / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n[redis]\nurl = "{redis.url}"\n'
                          f'[models.final]\nbase_urls = ["{final}"]\n')
        with serve_workers(config) as running:
            yield running


def scrape(client: httpx.Client) -> Samples:
    r = client.get("/metrics")
    assert r.status_code == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def served(samples: Samples) -> float:
    return samples.get(("ocm_requests_total", frozenset({("route", "/v1/responses"), ("model", "final"),
                                                         ("status", "200")})), 0.0)


def upstream_count(samples: Samples) -> float:
    return samples.get(("ocm_upstream_seconds_count", frozenset({("model", "final")})), 0.0)


def post(client: httpx.Client, gw: Running, pid: int) -> None:
    r = client.post("/v1/responses", json={"model": "final", "input": "hi", "store": False})
    assert r.status_code == 200, r.text
    assert worker_of(r, gw) == pid


def test_a_scrape_of_either_worker_counts_both(gateway: Running) -> None:
    ca, cb, pa, pb = pinned(gateway)
    try:
        for _ in range(3):
            post(ca, gateway, pa)
        for _ in range(2):
            post(cb, gateway, pb)
        for client, pid in ((ca, pa), (cb, pb)):
            r = client.get("/metrics")
            assert worker_of(r, gateway) == pid  # each worker answers a scrape in turn
            samples = scrape(client)
            assert served(samples) == 5
            assert upstream_count(samples) == 5  # a histogram's _count likewise
            assert samples[("ocm_workers", frozenset())] == 2
            assert samples[("ocm_workers_reporting", frozenset())] == 2
    finally:
        ca.close()
        cb.close()


def test_with_redis_the_workers_of_a_replica_still_merge(redis_gateway: Running) -> None:
    ca, cb, pa, pb = pinned(redis_gateway)
    try:
        post(ca, redis_gateway, pa)
        for _ in range(2):
            post(cb, redis_gateway, pb)
        for client in (ca, cb):
            samples = scrape(client)
            assert served(samples) == 3
            assert samples[("ocm_workers_reporting", frozenset())] == 2
    finally:
        ca.close()
        cb.close()


def test_a_worker_killed_a_scrape_answers_at_once_and_nothing_goes_backwards(gateway: Running) -> None:
    ca, cb, pa, pb = pinned(gateway)
    try:
        post(ca, gateway, pa)
        post(cb, gateway, pb)
        before = served(scrape(ca))
        assert before >= 2
        assert scrape(cb)[("ocm_workers_reporting", frozenset())] == 2
        os.kill(pb, signal.SIGKILL)
        t0 = time.monotonic()
        samples = scrape(ca)
        assert time.monotonic() - t0 < 2.0  # at most the relay's deadline, not a hang
        assert served(samples) >= before  # the killed worker's counts as last heard
        # the supervisor starts a replacement; it joins the relay and the total goes on
        deadline = time.monotonic() + 60
        while scrape(ca).get(("ocm_workers", frozenset()), 0) < 2:
            assert time.monotonic() < deadline, workers(gateway)
            time.sleep(0.2)
        post(ca, gateway, pa)
        after = scrape(ca)
        assert served(after) >= before + 1
        assert after[("ocm_workers_reporting", frozenset())] == 2
    finally:
        ca.close()
        cb.close()
