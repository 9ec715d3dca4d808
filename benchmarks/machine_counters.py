"""What per-key limits cost a request with ``--workers N`` and no Redis (the machine's counter
service, app/http/machine_counters.py) against one process counting alone (``LocalCounters``).

``python -m benchmarks.machine_counters [--n 5000] [--rounds 3] [--concurrency 32]``: one
generation's admission and release (the two calls the limits middleware makes) ``--n`` times,
one at a time and ``--concurrency`` at a time, for: a key without limits (not counted: the
path every request takes without auth or limits), a limited key counted in this process, and a
limited key counted by a real service process (one connection, as one worker has).  Rounds are
interleaved.  Reports µs per request (wall) and CPU µs per request (this process + the
service's, read from /proc).  Markdown to stdout; ``--json FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.http.counters import Budget, Counters, LocalCounters
from app.http.machine_counters import MachineCounters

LIMITED = Budget(rpm=10**9, tpm=10**12, concurrent=10**6)
FREE = Budget(None, None, None)


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one(counters: Counters, budget: Budget, i: int) -> None:
    lease = f"l{i}"
    refused = await counters.admit("key:bench", budget, generation=True, lease=lease)
    assert refused is None
    counters.release("key:bench", lease, 80)


async def _run(counters: Counters, budget: Budget, n: int, concurrency: int) -> float:
    if concurrency == 1:
        t0 = time.perf_counter()
        for i in range(n):
            await _one(counters, budget, i)
        return time.perf_counter() - t0
    sem = asyncio.Semaphore(concurrency)

    async def bounded(i: int) -> None:
        async with sem:
            await _one(counters, budget, i)

    t0 = time.perf_counter()
    await asyncio.gather(*(bounded(i) for i in range(n)))
    return time.perf_counter() - t0


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-counters-"))
    path = tmp / "c.sock"
    service = await asyncio.create_subprocess_exec(sys.executable, "-m", "app.http.machine_counters",
                                                   str(path), "900", str(os.getpid()))
    for _ in range(2000):
        if path.exists():
            break
        await asyncio.sleep(0.01)
    shared = MachineCounters(str(path))
    await _run(shared, LIMITED, 200, 1)  # connect, warm
    cases: dict[str, tuple[Counters, Budget]] = {
        "no limits (not counted)": (LocalCounters(), FREE),
        "limited, this process (LocalCounters)": (LocalCounters(), LIMITED),
        "limited, machine service (MachineCounters)": (shared, LIMITED)}
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for _ in range(args.rounds):
            for concurrency in (1, args.concurrency):
                for name, (counters, budget) in cases.items():
                    cpu0 = time.process_time() + _cpu(service.pid)
                    wall = await _run(counters, budget, args.n, concurrency)
                    cpu = time.process_time() + _cpu(service.pid) - cpu0
                    row = results.setdefault(f"{name}, c={concurrency}", {"wall_us": [], "cpu_us": []})
                    row["wall_us"].append(wall / args.n * 1e6)
                    row["cpu_us"].append(cpu / args.n * 1e6)
    finally:
        service.kill()
    return {name: {k: statistics.median(v) for k, v in row.items()} for name, row in results.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    print("| case | µs per request (wall) | CPU µs per request (gateway + service) |\n|---|---|---|")
    for name, row in out.items():
        print(f"| {name} | {row['wall_us']:.1f} | {row['cpu_us']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
