"""The overhead benchmark's subprocesses: the fake upstream and one gateway per source tree.

Each runs with its tree's code (``cwd`` and ``PYTHONPATH``); the gateway is started through the
tree's ``ocm-gateway`` entry point (``--workers N`` for a tree with several workers) and reports
where ``app`` and ``adapters`` came from, which must be that tree. Also the CPU time of a process
and its descendants (uvicorn's worker processes), read from ``/proc``.

With several workers uvicorn binds the listening socket itself, as ``socket.socket(AF_INET)``:
protocol 0, so asyncio does not set ``TCP_NODELAY`` on the accepted connections (it does so only
for ``IPPROTO_TCP`` sockets) and a response written in two pieces waits for the client's delayed
ACK (~40 ms at concurrency 1). A tree with ``nodelay`` (``--workers-nodelay``, a benchmark-only
patch of the launcher, not of the gateway) re-labels that socket as ``IPPROTO_TCP``, to measure
what the workers give without that delay.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.overhead.targets import CHAT_MODEL, HARMONY_MODEL, UPSTREAM_CHAT_MODEL
from benchmarks.overhead.trees import ROOT, Tree, tree_env

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (field 3 on: state, ppid, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and of its live descendants (Linux ``/proc``)."""
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = _stat(entry.name)
                parents[int(entry.name)] = int(fields[1])
                times[int(entry.name)] = int(fields[11]) + int(fields[12])
    mine = {pid}
    grew = True
    while grew:  # descendants: parent chains into ``mine``
        before = len(mine)
        mine |= {child for child, parent in parents.items() if parent in mine}
        grew = len(mine) > before
    return sum(times.get(p, 0) for p in mine) / CLK_TCK


@dataclass
class Fake:
    process: subprocess.Popen[bytes]
    urls: dict[str, str]
    answer: str


# ``python -c FAKE_LAUNCHER ROOT ARGS...``: the fake's command line with ARGS, ``benchmarks``
# imported from ROOT (this checkout) and ``app`` (its Harmony encoding) from the tree in ``cwd``
# and ``PYTHONPATH``, which may be another checkout.
FAKE_LAUNCHER = """\
import sys
sys.path.insert(0, sys.argv.pop(1))
from benchmarks.overhead.fake.__main__ import main
del sys.path[0]
sys.exit(main(sys.argv[1:]))
"""


@contextlib.contextmanager
def start_fake(tokens: int, ttft: float, gap: float, tree: Tree) -> Iterator[Fake]:
    """The fake (``benchmarks.overhead.fake`` of this checkout) with ``tree``'s Harmony encoding."""
    cmd = [sys.executable, "-c", FAKE_LAUNCHER, str(ROOT), "--tokens", str(tokens),
           "--ttft", str(ttft), "--gap", str(gap), "--chat-model", UPSTREAM_CHAT_MODEL]
    proc = subprocess.Popen(cmd, cwd=tree.path, env=tree_env(tree), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fake upstream exited with {proc.wait()}")
        info = json.loads(line)
        yield Fake(proc, {k: info[k] for k in ("llamacpp", "openai", "control")}, info["answer"])
    finally:
        stop(proc, 10)


def harmony_model(fake: Fake, current_date: str = "2026-11-22") -> str:
    """The config table of the Harmony model on the fake's llama.cpp (8,192 tokens)."""
    return f"""\
[models."{HARMONY_MODEL}"]
backend = "llamacpp"
base_urls = ["{fake.urls['llamacpp']}"]
prompt_format = "harmony"
context_window = 8192

[models."{HARMONY_MODEL}".harmony]
current_date = "{current_date}"
"""


def gateway_config(port: int, fake: Fake) -> str:
    return f"""\
# written by python -m benchmarks.overhead
host = "127.0.0.1"
port = {port}

[store]
path = ":memory:"

{harmony_model(fake)}
[models."{CHAT_MODEL}"]
backend = "openai"
base_urls = ["{fake.urls['openai']}"]
upstream_model = "{UPSTREAM_CHAT_MODEL}"
context_window = 8192
"""


@dataclass
class Gateway:
    tree: Tree
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    config: str
    imported: dict[str, str]  # top-level package -> the file it was imported from


# ``python -c LAUNCHER MODULE:FUNCTION ARGS...``: the tree's ``ocm-gateway`` entry point with
# ARGS, first saying where its packages come from.
LAUNCHER = """\
import importlib, json, os, socket, sys
import adapters, app
if os.environ.get("OCM_OVERHEAD_NODELAY") == "1":
    import uvicorn.config
    bind = uvicorn.config.Config.bind_socket
    def bind_tcp(self):
        sock = bind(self)
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return sock
        return socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
    uvicorn.config.Config.bind_socket = bind_tcp
module, _, function = sys.argv.pop(1).partition(":")
main = getattr(importlib.import_module(module), function)
print("ocm-overhead-imports " + json.dumps({"app": app.__file__, "adapters": adapters.__file__}),
      file=sys.stderr, flush=True)
sys.exit(main(sys.argv[1:]))
"""
IMPORTS_MARK = "ocm-overhead-imports "


def imported_from(log_path: Path, tree: Tree) -> dict[str, str]:
    """The launcher's report of where ``app`` and ``adapters`` came from; both must be in ``tree``."""
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith(IMPORTS_MARK):
            files: dict[str, str] = json.loads(line[len(IMPORTS_MARK):])
            root = tree.path.resolve()
            wrong = {k: v for k, v in files.items() if root not in Path(v).resolve().parents}
            if wrong:
                raise RuntimeError(f"gateway {tree.label!r} imported {wrong}, not from {root}")
            return files
    raise RuntimeError(f"gateway {tree.label!r} did not report its imports:\n{log_tail(log_path)}")


@contextlib.contextmanager
def start_gateway(fake: Fake, tree: Tree, workdir: Path, log_level: str,
                  config_for: Callable[[int], str] | None = None) -> Iterator[Gateway]:
    """``ocm-gateway serve`` from ``tree`` (cwd and ``PYTHONPATH``), config and log in ``workdir``,
    with ``--workers N`` (the tree's count, always given: ``serve``'s default is ``auto``);
    yields it once ``/ready`` answers 200.  The config is ``config_for(port)``, by default
    :func:`gateway_config`'s."""
    port = free_port()
    config = config_for(port) if config_for else gateway_config(port, fake)
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "gateway.toml"
    cfg_path.write_text(config)
    log_path = workdir / "gateway.log"
    cmd = [sys.executable, "-c", LAUNCHER, tree.entry, "serve", "--config", str(cfg_path),
           "--log-level", log_level, "--workers", str(tree.workers)]  # always: serve's default is auto
    env = tree_env(tree) | ({"OCM_OVERHEAD_NODELAY": "1"} if tree.nodelay else {})
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=tree.path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, "gateway", log_path, 60, 0.1,
                   lambda: httpx.get(f"{url}/ready", timeout=2).status_code == 200
                   and started(log_path, tree.workers, log_level))
        yield Gateway(tree, proc, url, log_path, config, imported_from(log_path, tree))
    finally:
        stop(proc, 15)


def started(log_path: Path, workers: int, log_level: str) -> bool:
    """Every worker has logged uvicorn's startup line (only looked for with several workers and a
    log level that shows it: one worker answering ``/ready`` is enough otherwise)."""
    if workers == 1 or log_level not in ("info", "debug"):
        return True
    return log_path.read_bytes().count(b"Application startup complete") >= workers


def log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:]


def wait_ready(proc: subprocess.Popen[bytes], what: str, log_path: Path, seconds: float, every: float,
               ready: Callable[[], bool]) -> None:
    """Poll ``ready()`` (an HTTP error counts as not yet) every ``every`` seconds until it holds;
    a RuntimeError with the log's tail if ``proc`` exits or ``seconds`` pass first."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log_tail(log_path)}")
        with contextlib.suppress(httpx.HTTPError):
            if ready():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {seconds:g} s:\n{log_tail(log_path)}")
        time.sleep(every)


def stop(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """SIGTERM, then SIGKILL if it is still running after ``seconds``."""
    proc.terminate()
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
