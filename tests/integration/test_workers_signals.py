"""``ocm-gateway serve --workers 2`` without Redis, as a subprocess: the workers share what Redis
carries between replicas through the machine's signal hub (app/engine/signal_hub.py, in the
counter service's process) — a background run followed live from the worker that does not run
it, a cancel delivered to the owner at once, an upstream cooldown learnt by one worker applied
by the other — and ``[limits] max_websockets`` is one count for both workers.  Each request is
sent on a connection whose worker is known from /proc (tests/integration/test_workers_limits.py)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import serve_workers
from tests.integration.test_workers_limits import (
    client_on,
    only,
    pinned,
    service,
    worker_holding,
    worker_of,
)
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import Running
from tests.support.wire import load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
Json = dict[str, Any]
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
TERMINAL = {"response.completed", "response.failed", "response.incomplete", "response.cancelled"}
ENDLESS = LoopbackUpstream(interval=0.02)
PACED = LoopbackUpstream(mode="final", events=FINAL, pace=True, interval=0.15)  # ~1.8 s a run
BAD = LoopbackUpstream(mode="error500")  # fails before its first byte: a cooldown
GOOD = LoopbackUpstream(mode="final", events=FINAL)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-signals")
    with ENDLESS.running() as endless, PACED.running() as paced, BAD.running() as bad, \
            GOOD.running() as good:
        config = tmp / "gw.toml"
        # a heartbeat of 20 s: a cancel that went through the store would take up to that
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\nheartbeat_seconds = 20.0\n'
                          f'lost_after_seconds = 120.0\n[limits]\nmax_websockets = 1\n'
                          f'[upstream]\ncooldown_seconds = 60.0\n'
                          f'[models.endless]\nbase_urls = ["{endless}"]\n'
                          f'[models.paced]\nbase_urls = ["{paced}"]\n'
                          f'[models.pair]\nbase_urls = ["{bad}", "{good}"]\n')
        with serve_workers(config) as running:
            yield running


def background(client: httpx.Client, gw: Running, pid: int, model: str) -> str:
    r = client.post("/v1/responses", json={"model": model, "input": "go", "background": True})
    assert r.status_code == 200, r.text
    assert worker_of(r, gw) == pid
    return str(r.json()["id"])


def follow(client: httpx.Client, rid: str, after: int | None = None, stop_at: int | None = None,
           seen: list[tuple[float, Json]] | None = None) -> list[Json]:
    """The events of ``GET /v1/responses/{rid}?stream=true`` (to the end, or up to sequence
    number ``stop_at``, then the stream is left), each also put in ``seen`` as it arrives."""
    params: dict[str, Any] = {"stream": "true"}
    if after is not None:
        params["starting_after"] = after
    out: list[Json] = []
    with client.stream("GET", f"/v1/responses/{rid}", params=params) as r:
        assert r.status_code == 200, r.read().decode()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            payload = json.loads(line[6:])
            out.append(payload)
            if seen is not None:
                seen.append((time.monotonic(), payload))
            if stop_at is not None and payload.get("sequence_number", -1) >= stop_at:
                break
    return out


def wait_status(client: httpx.Client, rid: str, limit: float = 30.0) -> str:
    deadline = time.monotonic() + limit
    while True:
        status = str(client.get(f"/v1/responses/{rid}").json()["status"])
        if status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def one_terminal_at_the_end(events: list[Json]) -> None:
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs  # no gap, no duplicate
    kinds = [e["type"] for e in events]
    assert kinds[-1] in TERMINAL and sum(k in TERMINAL for k in kinds) == 1, kinds


def test_a_live_run_is_followed_from_the_other_worker(gateway: Running) -> None:
    """Was a 400 ``not_resumable_here``: B streams A's run live (its first events well before the
    run ends), the same events A stores, ending with exactly one terminal event."""
    a, b, pa, _ = pinned(gateway)
    rid = background(a, gateway, pa, "paced")
    seen: list[tuple[float, Json]] = []
    live = follow(b, rid, seen=seen)
    assert seen[-1][0] - seen[0][0] > 0.8  # streamed as the run went (~1.8 s), not at its end
    one_terminal_at_the_end(live)
    assert live[0]["sequence_number"] == 0 and live[-1]["type"] == "response.completed"
    assert follow(a, rid) == live  # what B followed is what A stored


def test_a_stream_resumes_on_the_other_worker_with_starting_after(gateway: Running) -> None:
    """B leaves after sequence number 3 and comes back with ``starting_after=3`` while the run
    still goes: the two parts are the whole run, nothing twice."""
    a, b, pa, pb = pinned(gateway)
    rid = background(a, gateway, pa, "paced")
    first = follow(b, rid, stop_at=3)
    assert first[-1]["sequence_number"] == 3
    again = client_on(gateway, pb)  # the stream left closed B's connection
    assert again.get(f"/v1/responses/{rid}").json()["status"] == "in_progress"
    rest = follow(again, rid, after=3)
    assert rest[0]["sequence_number"] == 4
    one_terminal_at_the_end(first + rest)
    assert first + rest == follow(a, rid)


def test_the_service_killed_mid_follow_ends_from_the_store(gateway: Running) -> None:
    """kill -9 of the machine's service (the hub) while B follows A's run: B's stream goes on
    from the store and, once the run is cancelled on A, ends with its terminal event, exactly
    once, no gap — the events A stored."""
    a, b, pa, _ = pinned(gateway)
    rid = background(a, gateway, pa, "endless")
    seen: list[tuple[float, Json]] = []
    result: list[list[Json]] = []
    reader = threading.Thread(target=lambda: result.append(follow(b, rid, seen=seen)), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while len(seen) < 5:
        assert time.monotonic() < deadline, "nothing followed"
        time.sleep(0.02)
    old = service(gateway)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    time.sleep(1.0)
    assert reader.is_alive()  # still following (the run goes on)
    cancelled = a.post(f"/v1/responses/{rid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
    reader.join(15)
    assert not reader.is_alive() and result
    one_terminal_at_the_end(result[0])
    assert result[0] == follow(a, rid)
    deadline = time.monotonic() + 10
    while service(gateway) in (None, old):  # restarted by serve (for the next tests)
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_cancel_on_the_other_worker_reaches_the_owner_at_once(gateway: Running) -> None:
    """Was answered after the owner's next heartbeat (through the store: 20 s here); now the
    hub hands it to the owner, which stops the run at once."""
    a, b, pa, pb = pinned(gateway)
    time.sleep(1.0)  # both workers' connections to a restarted hub are back
    rid = background(a, gateway, pa, "endless")
    time.sleep(0.3)
    t0 = time.monotonic()
    cancelled = b.post(f"/v1/responses/{rid}/cancel")
    took = time.monotonic() - t0
    assert worker_of(cancelled, gateway) == pb
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
    assert took < 1.5, took
    assert wait_status(a, rid) == "cancelled"


def test_a_cooldown_learnt_by_one_worker_applies_to_the_other(gateway: Running) -> None:
    """The first upstream fails on A (500 before its first byte): A fails over and puts it in
    cooldown; B, told through the hub, never tries it."""
    a, b, pa, pb = pinned(gateway)
    time.sleep(1.0)
    before = BAD.requests
    r = a.post("/v1/responses", json={"model": "pair", "input": "hi", "store": False})
    assert r.status_code == 200 and worker_of(r, gateway) == pa, r.text
    assert BAD.requests == before + 1  # A tried it first
    time.sleep(0.3)
    r = b.post("/v1/responses", json={"model": "pair", "input": "hi", "store": False})
    assert r.status_code == 200 and worker_of(r, gateway) == pb, r.text
    assert BAD.requests == before + 1  # B skipped it


def _upgrade(gw: Running, pid: int) -> tuple[int, socket.socket]:
    """A WebSocket upgrade of /v1/responses on worker ``pid``: (status, the open socket).  The
    worker is checked once it accepted the connection, before the request (a refused upgrade's
    connection is closed at once, and then no worker holds it)."""
    port = int(gw.url.rsplit(":", 1)[1])
    for _ in range(20):
        with only(gw, pid):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            deadline = time.monotonic() + 1.0
            while (holder := _worker_of_socket(sock, gw)) is None and time.monotonic() < deadline:
                time.sleep(0.01)  # not accepted yet (or queued at a stopped worker's socket)
            if holder != pid:
                sock.close()
                continue
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall(f"GET /v1/responses HTTP/1.1\r\nhost: gw\r\nupgrade: websocket\r\n"
                         f"connection: Upgrade\r\nsec-websocket-key: {key}\r\n"
                         f"sec-websocket-version: 13\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                assert chunk, head
                head += chunk
        return int(head.split(b" ", 2)[1]), sock
    raise AssertionError(f"no upgrade reached worker {pid}")


def _worker_of_socket(sock: socket.socket, gw: Running) -> int | None:
    return worker_holding(gw, sock.getsockname()[1])


def test_max_websockets_is_one_count_for_both_workers(gateway: Running) -> None:
    """``max_websockets = 1``: was one per worker (2 open); the upgrade on B is a 429 while A's
    socket is open, and accepted once it closed."""
    _, _, pa, pb = pinned(gateway)
    status, held = _upgrade(gateway, pa)
    assert status == 101
    try:
        refused, sock = _upgrade(gateway, pb)
        sock.close()
        assert refused == 429
    finally:
        held.close()
    deadline = time.monotonic() + 5
    while True:
        status, sock = _upgrade(gateway, pb)
        sock.close()
        if status == 101:
            break
        assert status == 429 and time.monotonic() < deadline
        time.sleep(0.1)
