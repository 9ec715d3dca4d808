"""``ocm-gateway serve --workers 2`` without Redis, as a subprocess: a key's limits are one budget
for both workers (the machine's counter service, app/http/machine_counters.py).  Each request
is sent on a keep-alive connection whose worker is known (the accepted socket found in that
worker's /proc/<pid>/fd), so "across workers" is what is tested, not what the kernel chose."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import serve_workers
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import Running, children, serve_workers_of
from tests.support.wire import load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
KEYS = {"one": "max_concurrent = 1", "killed": "max_concurrent = 1", "restart": "max_concurrent = 1",
        "rpm": "requests_per_minute = 4", "free": ""}


def sha(name: str) -> str:
    return hashlib.sha256(f"sk-{name}".encode()).hexdigest()


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer sk-{name}"}


ENDLESS = LoopbackUpstream(interval=0.02)  # its requests: the generations that were admitted


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-limits")
    endless, final = ENDLESS, LoopbackUpstream(mode="final", events=FINAL)
    with endless.running() as endless_url, final.running() as final_url:
        keys = "".join(f'[[auth.keys]]\nname = "{n}"\nsha256 = "{sha(n)}"\n{extra}\n'
                       for n, extra in KEYS.items())
        config = tmp / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n{keys}'
                          f'[models.endless]\nbase_urls = ["{endless_url}"]\n'
                          f'[models.final]\nbase_urls = ["{final_url}"]\n')
        with serve_workers(config) as running:
            yield running


def workers(gw: Running) -> list[int]:
    return serve_workers_of(gw.process.pid)


def service(gw: Running) -> int | None:
    return next((pid for pid, cmd in children(gw.process.pid).items()
                 if b"app.http.machine_counters" in cmd), None)


def worker_holding(gw: Running, local_port: int) -> int | None:
    """The worker holding the gateway's end of the connection from ``local_port`` (from /proc)."""
    gw_port = int(gw.url.rsplit(":", 1)[1])
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (int(fields[1].split(":")[1], 16) == gw_port and int(fields[2].split(":")[1], 16) == local_port):
            inodes.add(f"socket:[{fields[9]}]")
    for pid in workers(gw):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                pass
    return None


def worker_of(response: httpx.Response, gw: Running) -> int:
    """The worker that accepted the connection ``response`` came on."""
    local_port = response.extensions["network_stream"].get_extra_info("socket").getsockname()[1]
    pid = worker_holding(gw, local_port)
    if pid is None:
        raise AssertionError("no worker holds this connection")
    return pid


def _client(gw: Running, timeout: float = 30) -> httpx.Client:
    return httpx.Client(base_url=gw.url, timeout=timeout,
                        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))


@contextlib.contextmanager
def only(gw: Running, pid: int) -> Iterator[None]:
    """Every other worker stopped (SIGSTOP, well within uvicorn's 5 s health check), so that
    ``pid`` accepts the connections made meanwhile (an idle worker on a shared socket tends to
    win every accept, so waiting for the kernel to spread them does not do)."""
    others = [w for w in workers(gw) if w != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(other, signal.SIGCONT)


def two_workers(gw: Running) -> tuple[int, int]:
    """Two workers that serve: /health was answered by the first one up, the other may still be
    starting (each probed alone, stopped for at most 2 s, then resumed for 1 s)."""
    deadline = time.monotonic() + 120
    ready: set[int] = set()
    while True:
        assert time.monotonic() < deadline, f"workers not serving: {workers(gw)}, ready {ready}"
        current = workers(gw)
        ready &= set(current)
        if len(ready) >= 2:
            pa, pb = sorted(ready)[:2]
            return pa, pb
        for pid in [w for w in current if w not in ready]:
            with only(gw, pid):
                try:
                    if _client(gw, timeout=2.0).get("/health").status_code == 200:
                        ready.add(pid)
                except httpx.HTTPError:
                    pass
            time.sleep(1.0)
        if len(current) < 2:
            time.sleep(0.2)


def client_on(gw: Running, pid: int) -> httpx.Client:
    """A client whose one keep-alive connection is served by worker ``pid``."""
    for _ in range(20):
        client = _client(gw, timeout=2.0)
        with only(gw, pid):
            try:
                served_by = worker_of(client.get("/health"), gw)
            except httpx.TimeoutException:  # a socket per worker: queued at a stopped one
                served_by = None
        if served_by == pid:
            client.timeout = httpx.Timeout(30)
            return client
        client.close()
    raise AssertionError(f"no connection reached worker {pid}")


def pinned(gw: Running) -> tuple[httpx.Client, httpx.Client, int, int]:
    """Two clients of one keep-alive connection each, served by different workers."""
    pa, pb = two_workers(gw)
    return client_on(gw, pa), client_on(gw, pb), pa, pb


def post(client: httpx.Client, gw: Running, pid: int, key: str) -> httpx.Response:
    r = client.post("/v1/responses", json={"model": "final", "input": "hi", "store": False},
                    headers=auth(key))
    assert worker_of(r, gw) == pid  # still the worker it was pinned to
    return r


def admitted_within(client: httpx.Client, gw: Running, pid: int, key: str, limit: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if post(client, gw, pid, key).status_code == 200:
            return time.monotonic() - t0
        time.sleep(0.02)
    return limit


class Holding:
    """A generation (non-streamed, on the endless model) running on worker ``pid``: it holds one
    of the key's slots until its connection is closed (the client leaving cancels it)."""

    def __init__(self, gw: Running, pid: int, key: str) -> None:
        self.gw, self.pid, self.key = gw, pid, key
        self.sock: socket.socket | None = None

    def __enter__(self) -> Holding:
        before = ENDLESS.requests
        body = json.dumps({"model": "endless", "input": "go", "store": False}).encode()
        head = (f"POST /v1/responses HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                f"authorization: Bearer sk-{self.key}\r\ncontent-length: {len(body)}\r\n\r\n")
        with only(self.gw, self.pid):
            self.sock = socket.create_connection(("127.0.0.1", int(self.gw.url.rsplit(":", 1)[1])))
            self.sock.sendall(head.encode() + body)
            deadline = time.monotonic() + 5
            while ENDLESS.requests == before:  # admitted: its generation reached the upstream
                assert time.monotonic() < deadline, "the holding request was not admitted"
                time.sleep(0.01)
        return self

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_concurrency_one_is_one_slot_for_both_workers(gateway: Running) -> None:
    """Was 2 slots (one per worker): the second generation of a ``max_concurrent = 1`` key on the
    other worker is a 429 while the first runs, and admitted once it ends."""
    _, b, pa, pb = pinned(gateway)
    with Holding(gateway, pa, "one"):
        refused = post(b, gateway, pb, "one")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
        assert refused.headers["retry-after"] == "1"
        assert post(b, gateway, pb, "free").status_code == 200  # a key without limits is not counted
    assert admitted_within(b, gateway, pb, "one", 5.0) < 2.0


def test_requests_per_minute_is_one_window_for_both_workers(gateway: Running) -> None:
    """4 a minute: 2 on A and 2 on B get through, the 5th is refused on either worker."""
    a, b, pa, pb = pinned(gateway)
    codes = [post(a, gateway, pa, "rpm").status_code for _ in range(2)]
    codes += [post(b, gateway, pb, "rpm").status_code for _ in range(2)]
    assert codes == [200] * 4
    for client, pid in ((b, pb), (a, pa)):
        refused = post(client, gateway, pid, "rpm")
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert 1 <= int(refused.headers["retry-after"]) <= 60


def test_a_killed_workers_slot_is_freed(gateway: Running) -> None:
    """kill -9 of the worker running the key's only generation: its connection to the service
    closes and the slot is free at once on the other worker (not after the 900 s lease)."""
    a, b, pa, pb = pinned(gateway)
    holding = Holding(gateway, pa, "killed").__enter__()
    assert post(b, gateway, pb, "killed").status_code == 429
    os.kill(pa, signal.SIGKILL)
    waited = admitted_within(b, gateway, pb, "killed", 5.0)
    assert waited < 1.0, waited
    holding.close()
    a.close()


def test_the_service_gone_is_a_503_then_restarted_with_the_slots_held(gateway: Running) -> None:
    """The counter service killed: counted requests get 503 ``limits_unavailable`` with
    Retry-After (closed, not open), keys without limits are served; the supervisor restarts it,
    the slot held through the restart is still held, and released as usual after."""
    _, b, pa, pb = pinned(gateway)
    with Holding(gateway, pa, "restart"):
        old = service(gateway)
        assert old is not None
        os.kill(old, signal.SIGKILL)
        down = post(b, gateway, pb, "restart")
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "limits_unavailable" and down.headers["retry-after"] == "1"
        assert post(b, gateway, pb, "free").status_code == 200
        t0 = time.monotonic()
        while True:  # 503 until restarted and past its grace, in which A re-registers its slot
            assert time.monotonic() - t0 < 10, "the service was not restarted"
            again = post(b, gateway, pb, "restart") if service(gateway) not in (None, old) else down
            if again.status_code != 503:
                break
            time.sleep(0.05)
        assert again.status_code == 429, again.text  # A's slot, held through the restart
        assert again.json()["error"]["code"] == "concurrency_limit_exceeded"
    assert admitted_within(b, gateway, pb, "restart", 5.0) < 2.0
