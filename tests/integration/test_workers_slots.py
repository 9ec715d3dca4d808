"""``ocm-gateway serve --workers 2`` without Redis, as a subprocess: a bounded llama.cpp replica's
slots are one bound for both workers (the machine's gate service, app/engine/gate_hub.py), not
one per worker.  Fake llama.cpp servers count the generations they are sent at once
(:mod:`tests.support.slots_upstream`): ``slots`` reports ``total_slots = 2`` on ``/props``;
``one`` is bounded by ``[models.one] max_inflight = 1`` and streams until its client leaves.
Each request goes on a connection whose worker is known (/proc), so "across workers" is what
is tested (helpers from test_workers_limits.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.conftest import serve_workers
from tests.integration.test_workers_limits import client_on, only, service, two_workers
from tests.support.process import Running
from tests.support.slots_upstream import SlotsUpstream
from tests.support.wire import load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
SLOTS = SlotsUpstream(2, events=FINAL, interval=0.06)  # ~0.7 s a generation, 2 slots
ONE = SlotsUpstream(4, mode="endless", interval=0.02)  # max_inflight = 1 in the config


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-slots")
    with SLOTS.running() as slots_url, ONE.running() as one_url:
        config = tmp / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n'
                          f'[models.slots]\nbackend = "llamacpp"\nbase_urls = ["{slots_url}"]\n'
                          f'[models.one]\nbackend = "llamacpp"\nbase_urls = ["{one_url}"]\n'
                          'max_inflight = 1\n')
        with serve_workers(config) as running:
            yield running


def stream(client: httpx.Client) -> str:
    with client.stream("POST", "/v1/responses", json={"model": "slots", "input": "hi", "stream": True,
                                                      "store": False}) as r:
        assert r.status_code == 200, r.read()
        return r.read().decode()


def burst(clients: list[httpx.Client]) -> None:
    """One stream on each client at once; every one completes."""
    SLOTS.reset()
    with ThreadPoolExecutor(len(clients)) as pool:
        answers = list(pool.map(stream, clients))
    for text in answers:
        assert "response.completed" in text, text[-500:]
    assert SLOTS.requests == len(clients)


def spread(gw: Running, per_worker: int = 3) -> list[httpx.Client]:
    pa, pb = two_workers(gw)
    return [client_on(gw, pid) for pid in (pa, pb) for _ in range(per_worker)]


class Waiting:
    """A non-streamed generation of ``one`` sent on a connection accepted by worker ``pid``;
    ``close`` is its client leaving."""

    def __init__(self, gw: Running, pid: int) -> None:
        body = json.dumps({"model": "one", "input": "go", "store": False}).encode()
        head = (f"POST /v1/responses HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n")
        with only(gw, pid):
            self.sock = socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1])))
            self.sock.sendall(head.encode() + body)
            time.sleep(0.3)  # accepted and read by that worker before the others resume

    def close(self) -> None:
        self.sock.close()


def sent_within(before: int, seconds: float) -> float | None:
    """Seconds until ``one`` was sent more than ``before`` generations, None if not within."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if ONE.requests > before:
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def gave_up(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    found = re.findall(r'^ocm_replica_gave_up(?:_total)?\{[^}]*model="one"[^}]*\} (\S+)$', text, re.M)
    return sum(float(v) for v in found)


def test_six_streams_over_two_workers_reach_a_two_slot_server_two_at_a_time(gateway: Running) -> None:
    """Was 2 per worker: 4 at once on a 2-slot server (llama.cpp queueing the rest)."""
    clients = spread(gateway)
    burst(clients)
    assert SLOTS.peak == 2


def test_a_client_that_leaves_while_waiting_gives_its_place_up(gateway: Running) -> None:
    pa, pb = two_workers(gateway)
    metrics_b = client_on(gateway, pb)
    before_gave_up = gave_up(metrics_b)
    before = ONE.requests
    holding = Waiting(gateway, pa)
    assert sent_within(before, 5.0) is not None  # A holds the one slot
    leaving = Waiting(gateway, pb)  # waits in the machine's queue: not sent
    assert sent_within(before + 1, 1.0) is None
    leaving.close()
    time.sleep(0.3)
    holding.close()  # the slot is free: nobody is waiting for it any more
    assert sent_within(before + 1, 1.0) is None  # the client that left never reached the backend
    assert gave_up(metrics_b) >= before_gave_up + 1
    fresh = Waiting(gateway, pb)  # nothing leaked: the slot is taken at once
    assert sent_within(before + 1, 2.0) is not None
    fresh.close()
    time.sleep(0.3)


def test_a_killed_workers_slot_is_free_for_the_other_at_once(gateway: Running) -> None:
    pa, pb = two_workers(gateway)
    before = ONE.requests
    holding = Waiting(gateway, pa)
    assert sent_within(before, 5.0) is not None
    waiting = Waiting(gateway, pb)
    assert sent_within(before + 1, 1.0) is None  # bounded across the workers
    os.kill(pa, signal.SIGKILL)
    took = sent_within(before + 1, 5.0)
    assert took is not None and took < 1.0, took
    waiting.close()
    holding.close()
    time.sleep(0.3)


def test_the_service_gone_requests_stay_bounded_and_served(gateway: Running) -> None:
    """Hung (SIGSTOP): one 1 s wait for its answer, then each worker keeps to ceil(2 / 2) = 1
    slot; killed: the same until the supervisor's restart answers; bounded, served, after both."""
    clients = spread(gateway)
    pid = service(gateway)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        burst(clients)
        assert SLOTS.peak <= 2
        burst(clients)  # in the share from the start: no wait for the hung service
        assert SLOTS.peak <= 2
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(1.5)  # the workers find the service again
    os.kill(pid, signal.SIGKILL)
    burst(clients)
    assert SLOTS.peak <= 2
    deadline = time.monotonic() + 30
    while service(gateway) in (None, pid):
        assert time.monotonic() < deadline, "the service was not restarted"
        time.sleep(0.1)
    time.sleep(1.5)
    burst(clients)
    assert SLOTS.peak == 2
    for client in clients:
        with contextlib.suppress(httpx.HTTPError):
            client.close()
