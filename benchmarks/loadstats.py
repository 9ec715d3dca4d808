"""Measurements for ``benchmarks.load``: a process tree's RSS and CPU from ``/proc``, percentiles,
stream overlap, and the markdown tables.

RSS is sampled (``VmRSS`` summed over the gateway and its descendants) and also read as each
process's ``VmHWM`` (its own lifetime peak) at the end, so a peak between two samples is not lost.
CPU is utime + stime of the tree plus its reaped children (``cutime`` + ``cstime``), Linux only.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """Fields of ``/proc/PID/stat`` after the command name (index 0 is field 3, the state)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree(root: int) -> list[int]:
    """``root`` and every live descendant (by parent pid, one pass over ``/proc``)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parents.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError):
                continue
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(parents.get(pid, []))
    return pids


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime + cutime + cstime over ``pids``, in seconds (processes gone are skipped)."""
    ticks = 0
    for pid in pids:
        try:
            fields = _stat(pid)
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])
    return ticks / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU time every core of the machine spent not idle (``/proc/stat``), in seconds."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK  # all but idle and iowait


class CpuMeter:
    """CPU seconds per named group of processes between construction and :meth:`stop`, plus
    ``other``: what the rest of the machine used meanwhile (another benchmark, say)."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.pids = groups
        self.start = {name: cpu_seconds(pids) for name, pids in self.pids.items()}
        self.busy = machine_busy_seconds()

    def stop(self) -> dict[str, float]:
        used = {name: cpu_seconds(pids) - self.start[name] for name, pids in self.pids.items()}
        used["other"] = max(0.0, machine_busy_seconds() - self.busy - sum(used.values()))
        return {name: round(v, 2) for name, v in used.items()}


def open_files_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return "/".join(line.split()[3:5])
    return "?"


@dataclass
class RssSampler:
    """Samples the RSS of ``root``'s process tree every ``every`` seconds while running."""

    root: int
    every: float = 0.1
    peak_kb: int = 0
    samples: int = 0
    pids: list[int] = field(default_factory=list)
    timeline: list[tuple[float, int, float]] = field(default_factory=list)  # (t, RSS kB, CPU s)

    def sample(self) -> int:
        if self.samples % 10 == 0:  # new workers are rare: look for them once a second
            self.pids = tree(self.root)
        total = 0
        for pid in self.pids:
            try:
                total += _status_kb(pid, "VmRSS:")
            except OSError:
                continue
        self.samples += 1
        self.peak_kb = max(self.peak_kb, total)
        self.timeline.append((time.perf_counter(), total, cpu_seconds(self.pids)))
        return total

    def per_second(self, t0: float, events: dict[str, list[float]]) -> list[dict[str, Any]]:
        """The run second by second from ``t0``: gateway CPU share, RSS, and how many of each
        kind of ``events`` (absolute times) fell in that second."""
        out: list[dict[str, Any]] = []
        prev = next((s for s in self.timeline if s[0] >= t0), self.timeline[0])
        for s in self.timeline:
            if s[0] - prev[0] >= 1.0 or s is self.timeline[-1]:
                row: dict[str, Any] = {"t": round(prev[0] - t0, 1),
                                       "cpu": round((s[2] - prev[2]) / max(s[0] - prev[0], 1e-9), 2),
                                       "rss_mb": round(s[1] / 1024, 1)}
                for name, times in events.items():
                    row[name] = sum(prev[0] <= t < s[0] for t in times)
                out.append(row)
                prev = s
        return out

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.every)
        self.sample()

    def hwm_kb(self) -> int:
        """Sum of each live process's own peak RSS (an upper bound of the tree's peak)."""
        total = 0
        for pid in tree(self.root):
            try:
                total += _status_kb(pid, "VmHWM:")
            except OSError:
                continue
        return total


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def dist_ms(values: list[float]) -> dict[str, float | None]:
    """p50 / p99 / max of seconds, in milliseconds."""
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        v = pct(values, q)
        out[name] = None if v is None else round(v * 1000, 1)
    return out


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant (an interval ending at t is closed before one starts)."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def _f(v: Any, fmt: str = "{:.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def _dist(d: dict[str, Any]) -> str:
    return " / ".join(_f(d[k]) for k in ("p50", "p99", "max"))


def _label(run: dict[str, Any]) -> str:
    """The streams, with the variant and round when the run compared several."""
    variant = f" {run['variant']} r{run['round']}" if run.get("variant") else ""
    return f"{run['streams']:,}{variant}"


def markdown(runs: list[dict[str, Any]], setup: str) -> str:
    """Two tables: every phase (direct and through the gateway), then the gateway summary."""
    lines = [f"Setup: {setup}", "",
             "### Phases (same client, same fake, same run; TTFB from connect, in ms)", "",
             "| streams | target | completed | 503 | other errors | wall s | peak streaming at once "
             "| TTFB first event p50 / p99 / max | first byte p50 / p99 / max "
             "| CPU s gateway / fake / client / rest of machine |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for name in ("direct", "gateway"):
            p = run[name]
            cpu = " / ".join(_f(p["cpu_s"].get(k), "{:.1f}") for k in ("gateway", "fake", "client", "other"))
            lines.append(f"| {_label(run)} | {name} | {p['completed']:,} | {p['refused_503']:,} "
                         f"| {p['other_errors']:,} | {p['wall_s']:.1f} | {p['peak_overlap']:,} "
                         f"| {_dist(p['ttfb_event_ms'])} | {_dist(p['ttfb_byte_ms'])} | {cpu} |")
    lines += ["", "### Gateway", "",
              "| streams | errors | completed | wall s | peak RSS MB (sampled / VmHWM) | idle RSS MB "
              "| CPU s (phase) | added TTFB p50 / p99 ms | slowest /health s | workers "
              "| CPU s per worker | most open fds per worker | listen overflows / SYN retransmits |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        g = run["gateway"]
        tcp = g.get("tcp", {})
        lines.append(f"| {_label(run)} | {g['errors']:,} | {g['completed']:,} | {g['wall_s']:.1f} "
                     f"| {g['rss_peak_mb']:.0f} / {g['rss_hwm_mb']:.0f} | {g['rss_idle_mb']:.0f} "
                     f"| {g['cpu_s']['gateway']:.1f} | {_f(run['added_ttfb_ms']['p50'])} / "
                     f"{_f(run['added_ttfb_ms']['p99'])} | {g['health_worst_s']:.2f} "
                     f"| {g.get('workers', '–')} "
                     f"| {' / '.join(f'{c:.1f}' for c in g.get('worker_cpu_s') or []) or '–'} "
                     f"| {' / '.join(str(n) for n in g.get('worker_peak_fds') or []) or '–'} "
                     f"| {_f(tcp.get('ListenOverflows'))} / {_f(tcp.get('TCPSynRetrans'))} |")
    return "\n".join(lines)
