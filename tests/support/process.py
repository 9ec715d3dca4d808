"""Run a server as a subprocess until its ``/health`` answers 200; stop it afterwards."""

from __future__ import annotations

import os
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
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)
