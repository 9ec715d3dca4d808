"""``serve --workers 2`` under :class:`app.cli.supervisor.Supervisor`, with a worker made slow
the way a loaded machine makes it slow: SIGSTOP, so none of its threads (the health-check
answerer included) is scheduled, then SIGCONT.

* A worker silent for 8 s (over uvicorn's 5 s timeout, under the gateway's 30 s) is kept: same
  pid afterwards, no replacement logged (uvicorn's own supervisor SIGKILLs it at ~5.5 s).
* SIGTERM to ``serve`` while it waits on that worker is acted on at once (uvicorn's waits for
  the ping's whole timeout first), and a worker that never exits is SIGKILLed after the drain
  (``timeout_graceful_shutdown``) plus the margin, so ``serve`` itself exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.cli.supervisor import EXIT_MARGIN_SECONDS, HEALTHCHECK_SECONDS
from tests.support.process import free_port, stop
from tests.support.process import serve_workers_of as workers

pytestmark = pytest.mark.integration

STOPPED_SECONDS = 8.0  # uvicorn's default timeout is 5 s
GRACE = 0  # shutdown_grace_seconds: serve passes timeout_graceful_shutdown = grace + 10


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Serve:
    proc: subprocess.Popen[bytes]
    log: Path
    url: str

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serve(tmp_path: Path) -> Iterator[Serve]:
    """``ocm-gateway serve --workers 2 --log-level info`` until both workers answer /health."""
    config = tmp_path / "gw.toml"
    config.write_text(f'shutdown_grace_seconds = {GRACE}\n[store]\npath = "{tmp_path / "r.sqlite3"}"\n'
                      '[models.m]\nbase_urls = ["http://127.0.0.1:9"]\n')
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCMGW", "OTEL_"))}
    exe = Path(sys.executable).with_name("ocm-gateway")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli.main"]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*cmd, "serve", "--config", str(config), "--host", "127.0.0.1",
                                 "--port", str(port), "--workers", "2", "--log-level", "info"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    running = Serve(proc, log, f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 180
        while running.text().count("Application startup complete") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, running.text()[-3000:]
            time.sleep(0.2)
        assert httpx.get(f"{running.url}/health", timeout=10).status_code == 200
        assert len(workers(proc.pid)) == 2
        yield running
    finally:
        for pid in workers(proc.pid) if proc.poll() is None else []:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        stop(proc)


def test_a_worker_silent_for_8_s_is_kept(tmp_path: Path) -> None:
    assert STOPPED_SECONDS < HEALTHCHECK_SECONDS
    with serve(tmp_path) as gw:
        first, second = workers(gw.proc.pid)
        os.kill(first, signal.SIGSTOP)
        try:
            time.sleep(STOPPED_SECONDS)
            # the other worker serves meanwhile (the listening socket is shared)
            assert httpx.get(f"{gw.url}/health", timeout=10).status_code == 200
        finally:
            with contextlib.suppress(ProcessLookupError):  # killed by an impatient supervisor
                os.kill(first, signal.SIGCONT)
        time.sleep(2)  # a round of health checks after it answers again
        assert workers(gw.proc.pid) == [first, second]
        assert "did not answer its health check" not in gw.text()
        assert "died" not in gw.text()
        assert httpx.get(f"{gw.url}/health", timeout=10).status_code == 200


def test_sigterm_while_a_worker_is_silent_is_acted_on_and_the_exit_is_bounded(tmp_path: Path) -> None:
    with serve(tmp_path) as gw:
        first, second = workers(gw.proc.pid)
        os.kill(first, signal.SIGSTOP)
        time.sleep(2)  # the supervisor is now waiting for this worker's answer
        sent = time.monotonic()
        gw.proc.send_signal(signal.SIGTERM)
        while "Received SIGTERM" not in gw.text():
            assert time.monotonic() - sent < 2.0, gw.text()[-2000:]  # uvicorn's: after the timeout
            time.sleep(0.05)
        # the stopped worker cannot exit: killed after the drain bound, then serve exits
        bound = GRACE + 10 + EXIT_MARGIN_SECONDS
        assert gw.proc.wait(timeout=bound + 15) == 0
        assert bound - 1 < time.monotonic() - sent
        assert not alive(first) and not alive(second)
        assert "still running" in gw.text()


def test_the_workers_of_a_killed_serve_exit_and_free_the_port(tmp_path: Path) -> None:
    """``kill -9`` of ``serve``: its workers get SIGTERM from the kernel, drain (nothing in
    flight here) and exit, so the port can be bound again (they served on, unsupervised)."""
    with serve(tmp_path) as gw:
        pids = workers(gw.proc.pid)
        gw.proc.send_signal(signal.SIGKILL)
        gw.proc.wait(10)
        deadline = time.monotonic() + 20
        try:
            while any(alive(pid) for pid in pids):
                assert time.monotonic() < deadline, [pid for pid in pids if alive(pid)]
                time.sleep(0.1)
        finally:  # orphans left by a failing run
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        port = int(gw.url.rsplit(":", 1)[1])
        with socket.socket() as again:
            again.bind(("127.0.0.1", port))
