"""The gateway side of ``benchmarks.load``: what to run, starting it, and what each worker did.

A :class:`Setting` is one gateway configuration to measure: a source tree (this checkout by
default; ``--tree LABEL=PATH[,NAME=VALUE...]`` another, e.g. a ``git archive`` export of HEAD as
the *before* of a change), environment variables (gateway settings), and a worker count
(``workers=N|auto`` among the pairs; unset: ``serve``'s own default, ``auto``).

:func:`start` runs ``ocm-gateway serve`` through the tree's entry point (``cwd`` and
``PYTHONPATH`` = the tree; the launcher reports where ``app`` and ``adapters`` were imported from,
which must be the tree) with a fresh SQLite *file* store in its own temporary directory (the
shipped default is a file, and ``--workers auto`` gives one worker for ``:memory:``), its log
(stdout and stderr) in that directory, and returns once ``/health`` answers and, at a log level
that shows it, every worker has logged uvicorn's start-up line.  The worker count comes from
``serve``'s own ``auto: N workers`` line or the explicit count; the worker pids from uvicorn's
``Started server process [PID]`` lines (log level ``info`` or ``debug``; none at ``error``).

:class:`WorkerSampler` reads, per worker, its CPU seconds over a phase and the most file
descriptors it held open at once (sampled: client connections + upstream connections + its
own files, the balance of a burst over the workers); :func:`tcp_counters` the machine's
listen-queue overflows and SYN retransmissions (``/proc/net/netstat``), per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.loadstats import cpu_seconds
from benchmarks.overhead.processes import LAUNCHER, imported_from
from benchmarks.overhead.trees import ROOT, Tree, tree_env

TCP_COUNTERS = ("ListenOverflows", "ListenDrops", "TCPSynRetrans")
_AUTO = re.compile(rb"auto: (\d+) worker")
_STARTED = re.compile(rb"Started server process \[(\d+)\]")


@dataclass
class Setting:
    """One gateway configuration of a run (see the module docstring)."""

    label: str
    tree: Tree
    env: dict[str, str] = field(default_factory=dict)
    workers: str | None = None  # serve --workers; None: serve's default


def _pairs(text: str) -> tuple[dict[str, str], str | None]:
    settings = dict(pair.split("=", 1) for pair in text.split(",") if pair)
    return {k: v for k, v in settings.items() if k != "workers"}, settings.get("workers")


def parse_variant(text: str) -> Setting:
    """``--variant LABEL:NAME=VALUE,...``: this checkout with those settings."""
    label, _, pairs = text.partition(":")
    env, workers = _pairs(pairs)
    return Setting(label or "default", Tree.at(label or "default", ROOT), env, workers)


def parse_tree(text: str) -> Setting:
    """``--tree LABEL=PATH[,NAME=VALUE...]``: the gateway of another source tree."""
    label, sep, rest = text.partition("=")
    path, _, pairs = rest.partition(",")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH[,NAME=VALUE...], got {text!r}")
    try:
        tree = Tree.at(label, Path(path).expanduser().resolve())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    env, workers = _pairs(pairs)
    return Setting(label, tree, env, workers)


@dataclass
class Gateway:
    proc: asyncio.subprocess.Process
    port: int
    workdir: Path
    workers: int
    worker_pids: list[int]
    imported: dict[str, str]

    @property
    def log(self) -> Path:
        return self.workdir / "gateway.log"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _health(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")
        ok = (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()
        return ok
    except OSError:
        return False


async def start(setting: Setting, base_env: dict[str, str], log_level: str,
                wait_s: float = 60.0) -> Gateway:
    """``serve`` for ``setting`` (see the module docstring); ``base_env``: the model and backend."""
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="ocm-load-"))
    env = tree_env(setting.tree) | base_env | {
        "OCMGW__store__path": str(workdir / "store" / "responses.sqlite3")} | setting.env
    cmd = ["-c", LAUNCHER, setting.tree.entry, "serve", "--port", str(port), "--log-level", log_level,
           *(["--workers", setting.workers] if setting.workers else [])]
    log = workdir / "gateway.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *cmd, cwd=setting.tree.path,
            env=env, stdout=out, stderr=asyncio.subprocess.STDOUT)
    explicit = int(setting.workers) if setting.workers and setting.workers.isdigit() else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        text = log.read_bytes()
        said = _AUTO.search(text)
        workers = explicit or (int(said.group(1)) if said else 1)
        started = len(_STARTED.findall(text))
        if (started >= workers or log_level not in ("info", "debug")) and await _health(port):
            break
        if proc.returncode is not None or loop.time() > deadline:
            await stop(proc, workdir, keep=True)
            raise RuntimeError(f"the gateway {setting.label!r} did not start:\n"
                               f"{text[-3000:].decode(errors='replace')}")
        await asyncio.sleep(0.1)
    pids = [int(pid) for pid in _STARTED.findall(text)]
    return Gateway(proc, port, workdir, workers, pids, imported_from(log, setting.tree))


async def stop(proc: asyncio.subprocess.Process, workdir: Path, keep: bool = False) -> None:
    """SIGTERM, then SIGKILL after 60 s; the temporary directory removed unless ``keep``."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)


def tcp_counters() -> dict[str, int]:
    """The machine's :data:`TCP_COUNTERS` (cumulative since boot; Linux)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            out = {k: int(row[k]) for k in TCP_COUNTERS if k in row}
    return out


def open_fds(pid: int) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return 0


class WorkerSampler:
    """Per worker: CPU seconds since construction (:meth:`cpu`) and peak open descriptors
    (:meth:`sample`, called by the caller's own probe loop)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.start = {pid: cpu_seconds([pid]) for pid in pids}
        self.peak_fds = dict.fromkeys(pids, 0)

    def sample(self) -> None:
        for pid in self.pids:
            self.peak_fds[pid] = max(self.peak_fds[pid], open_fds(pid))

    def cpu(self) -> list[float]:
        return [round(cpu_seconds([pid]) - self.start[pid], 2) for pid in self.pids]
