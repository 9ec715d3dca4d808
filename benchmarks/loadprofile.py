"""py-spy on every gateway worker during a burst of ``benchmarks.load``, and the samples grouped.

``python -m benchmarks.load ... --profile DIR`` records each worker with its own py-spy
(``--nonblocking``, raw collapsed stacks, idle samples left out: CPU only) from the start of the
gateway phase until every stream has had its first event (or the phase ends): the burst's set-up,
not the streaming that follows.  ``python -m benchmarks.loadprofile FILE...`` prints, per file
and in total, the share of samples in each :data:`GROUPS` entry (the rule is at the list), the
rest of the event loop's thread as ``other``, whose heaviest leaf frames are listed so that a
missing group shows, and the samples of other threads (SQLite's, ``to_thread``'s, the
supervisor's health check) apart: py-spy samples every thread, and one waiting for the GIL counts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import sys
from pathlib import Path

# (group, substrings of a frame "function (file.py:line)"), in priority order: a stack belongs to
# the group of its frame nearest the leaf that matches one (a frame matching several: the first
# group listed); a stack with none is the event loop's own when its leaf is, else other.
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("logging, access log, metrics", ("logging/", "app/http/observe.py", "app/metrics.py",
                                      "prometheus_client")),
    ("upstream connect (a new TCP connection)", (
        "aiohappyeyeballs", "_create_direct_connection", "_wrap_create_connection", "sock_connect",
        "create_connection (asyncio", "_connect_sock")),
    ("admission and gates", ("app/engine/admission.py", "app/engine/machine_gate.py",
                             "app/engine/gate_hub.py", "app/http/machine_counters.py",
                             "app/http/counters.py")),
    ("stream events: upstream read, parse, run", (
        "aiohttp/streams.py", "aiohttp/client_proto.py", "aiohttp/_http_parser", "adapters/sse.py",
        "adapters/transport.py", "adapters/llamacpp.py", "app/engine/stream.py",
        "app/engine/run.py", "app/formats/harmony/parse")),
    ("SSE send (response writes)", ("app/http/sse_send.py", "app/http/streaming.py",
                                    "app/api/chat/wire.py", "app/api/chat/encode.py",
                                    "send (uvicorn/")),
    ("body read + validation", ("app/http/body.py", "pydantic", "app/http/limits.py",
                                "fastapi/")),
    ("render (prompt format)", ("app/formats/", "openai_harmony")),
    ("upstream request (aiohttp)", ("aiohttp/", "adapters/aiohttp_transport.py",
                                    "adapters/upstream.py", "yarl/", "multidict")),
    ("accept + HTTP parse", ("_accept_connection", "app/http/server.py", "httptools_impl.py",
                             "h11_impl.py", "flow_control.py")),
    ("route + engine set-up (the rest of the app)", ("app/", "adapters/", "starlette/")),
]
FALLBACK = ("event loop + sockets", ("asyncio/", "selectors.py"))
LOOP = "run_forever (asyncio/base_events.py"  # in every stack of the event loop's thread
OFF_LOOP = "other threads (a thread sampled while it holds or waits for the GIL)"


class Recorder:
    """One ``py-spy record`` per worker pid, stopped (SIGINT: it writes its file) by :meth:`stop`."""

    def __init__(self, pids: list[int], prefix: Path, rate: int) -> None:
        self.pids, self.prefix, self.rate = pids, prefix, rate
        self.procs: list[asyncio.subprocess.Process] = []
        self.files: list[Path] = []

    async def start(self) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        for i, pid in enumerate(self.pids):
            out = self.prefix.with_name(f"{self.prefix.name}-w{i + 1}.txt")
            self.files.append(out)
            self.procs.append(await asyncio.create_subprocess_exec(
                exe, "record", "--nonblocking", "--format", "raw", "--rate", str(self.rate),
                "--pid", str(pid), "--output", str(out), stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL))

    async def stop(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        self.procs = []


def read_stacks(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw format: ``frame;frame;...;leaf COUNT`` a line."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def group_of(frames: list[str]) -> str:
    if not any(LOOP in frame for frame in frames):
        return OFF_LOOP
    for frame in reversed(frames):
        for name, patterns in GROUPS:
            if any(p in frame for p in patterns):
                return name
    name, patterns = FALLBACK
    return name if any(p in frames[-1] for p in patterns) else "other"


def grouped(stacks: list[tuple[list[str], int]]) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(samples per group, samples per leaf frame of the ``other`` group)."""
    groups: collections.Counter[str] = collections.Counter()
    others: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        name = group_of(frames)
        groups[name] += count
        if name == "other":
            others[frames[-1]] += count
    return groups, others


def table(files: list[Path]) -> str:
    """Per file (a worker) and in total: samples of each group, and its share of the event loop's
    samples (other threads' are counted apart)."""
    per = {f: grouped(read_stacks(f))[0] for f in files}
    total: collections.Counter[str] = collections.Counter()
    for counts in per.values():
        total.update(counts)
    on_loop = sum(total.values()) - total[OFF_LOOP]
    names = [g for g, _ in GROUPS] + [FALLBACK[0], "other"]
    head = "| group | " + " | ".join(f.stem for f in files) + " | all | share of the loop's |"
    lines = [head, "|---" * (len(files) + 3) + "|"]
    for name in names:
        cells = " | ".join(str(per[f][name]) for f in files)
        lines.append(f"| {name} | {cells} | {total[name]} | {100 * total[name] / max(1, on_loop):.1f} % |")
    lines.append("| **the event loop's samples** | "
                 + " | ".join(str(sum(per[f].values()) - per[f][OFF_LOOP]) for f in files)
                 + f" | {on_loop} | 100 % |")
    lines.append(f"| {OFF_LOOP} | " + " | ".join(str(per[f][OFF_LOOP]) for f in files)
                 + f" | {total[OFF_LOOP]} | – |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+", help="py-spy raw outputs (one per worker)")
    parser.add_argument("--others", type=int, default=15, help="heaviest 'other' leaves to list")
    args = parser.parse_args(argv)
    print(table(args.files))
    others: collections.Counter[str] = collections.Counter()
    for f in args.files:
        others.update(grouped(read_stacks(f))[1])
    if others and args.others:
        print("\nheaviest leaves in 'other':")
        for leaf, count in others.most_common(args.others):
            print(f"  {count:6d}  {leaf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
