"""Run a server as a subprocess until its ``/health`` answers 200 (or, :func:`wait_for_port`, its
port accepts connections); stop it afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(proc: subprocess.Popen[bytes], port: int, seconds: float, what: str) -> None:
    """Until ``127.0.0.1:port`` accepts a connection; a RuntimeError if ``proc`` exits or
    ``seconds`` pass first."""
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start ({proc.returncode})")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 5 s."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (from /proc), children before grandchildren."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
                    found.append(int(child))
    return found + [grandchild for child in found for grandchild in descendants(child)]


def children(pid: int) -> dict[int, bytes]:
    """The processes ``pid`` started (from /proc), each with its command line."""
    found = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
            with contextlib.suppress(OSError):  # gone since
                found[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes()
    return found


def serve_workers_of(pid: int) -> list[int]:
    """The worker processes of the ``ocm-gateway serve --workers N`` at ``pid``, in pid order."""
    return sorted(child for child, cmd in children(pid).items() if b"spawn_main" in cmd)


def crash(proc: subprocess.Popen[bytes]) -> None:
    """``kill -9`` of a whole ``ocm-gateway serve``, its workers included, as a crash of the
    machine's gateway.  With ``--workers N``, SIGKILL of ``serve`` alone is not a crash: its
    workers then get SIGTERM from the kernel and drain (app/cli/supervisor.py), ending their
    runs as a shutdown does.  The supervisor is stopped first so it restarts no worker."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGSTOP)
    for pid in descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait(10)


@dataclass(frozen=True)
class Running:
    url: str
    process: subprocess.Popen[bytes]


@contextmanager
def healthy_process(cmd: Sequence[str], url: str, *, timeout: float = 90.0,
                    env: dict[str, str] | None = None) -> Iterator[Running]:
    """Start ``cmd`` (cwd: repo root), wait for ``GET {url}/health`` == 200, yield it.

    On failure the error carries the tail of the process's output; on exit the process
    gets SIGTERM, then SIGKILL after 5 s.
    """
    log = tempfile.NamedTemporaryFile(prefix="ocm-test-server-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                            env=dict(os.environ) if env is None else env)

    def output() -> str:
        log.flush()
        return Path(log.name).read_text(errors="replace")[-4000:]

    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}:\n{output()}")
            try:
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[0]} not healthy after {timeout}s:\n{output()}")
            time.sleep(0.1)
        yield Running(url, proc)
    finally:
        stop(proc)
        log.close()
        os.unlink(log.name)


SUITE_WORKERS = "OCMGW_WORKERS"


def launch_env(strip: tuple[str, ...] = ("OCMGW",)) -> dict[str, str]:
    """This environment without the variables starting with ``strip`` (the gateway under test
    is configured by its test alone), except ``OCMGW_WORKERS``: the worker count is how the
    suite is run, not what a test checks, so ``OCMGW_WORKERS=auto pytest ...`` runs every
    ``serve`` started through this with the machine's workers (a test that needs one process
    passes ``--workers 1``, which wins)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(strip) or k == SUITE_WORKERS}


@contextmanager
def gateway_process(upstream: str, model: str, **settings: object) -> Iterator[str]:
    """``ocm-gateway serve`` (the console script of this venv) for one llama.cpp-style model
    at ``upstream``; ``settings`` are ``OCMGW__...`` overrides (``limits__max_queue=1``)."""
    import sys

    port = free_port()
    env = launch_env()
    env.update({"OCMGW_MODEL": model, "OCMGW_BACKEND_URL": upstream, "OCMGW__store__path": ":memory:"})
    env.update({f"OCMGW__{k}": str(v) for k, v in settings.items()})
    cmd = [str(Path(sys.executable).with_name("ocm-gateway")), "serve", "--port", str(port),
           "--log-level", "warning"]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=30, env=env) as gw:
        yield gw.url
