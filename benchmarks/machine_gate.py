"""What a bounded replica's gate costs a generation with ``--workers N`` and no Redis (the
machine's gate service, app/engine/gate_hub.py, through app/engine/machine_gate.py) against one
worker's own gate (``ReplicaGate``, in process).

``python -m benchmarks.machine_gate [--n 5000] [--rounds 3] [--concurrency 32]``: one
generation's gate acquire and release (what ``adapters.routing.failover`` does around a
bounded replica) ``--n`` times, one at a time and ``--concurrency`` at a time, for: a replica
with no known bound behind a machine gate (no round trip), a bounded replica's local gate, and
its machine gate (a real service process, one connection as one worker has); with a bound
large enough that nobody waits, and with a bound of 4 (most requests queue: the "queued" answer
and the grant).  Rounds are interleaved.  Reports µs per generation (wall) and CPU µs (this
process + the service's, from /proc).  Markdown to stdout; ``--json FILE``.
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

from app.engine.admission import ReplicaGate
from app.engine.machine_gate import GateClient, MachineGate

URL = "http://llama:8080"


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _no_slots(url: str) -> int | None:
    return None


async def _run(gate: ReplicaGate, n: int, concurrency: int) -> float:
    async def one() -> None:
        await gate.acquire()
        await asyncio.sleep(0)  # the generation: one turn of the loop
        gate.release()

    if concurrency == 1:
        t0 = time.perf_counter()
        for _ in range(n):
            await one()
        return time.perf_counter() - t0
    sem = asyncio.Semaphore(concurrency)

    async def bounded() -> None:
        async with sem:
            await one()

    t0 = time.perf_counter()
    await asyncio.gather(*(bounded() for _ in range(n)))
    return time.perf_counter() - t0


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-gates-"))
    path = tmp / "c.sock"
    gates = tmp / "g.sock"
    service = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.http.machine_counters", str(path), "900", str(os.getpid()), "0",
        "", "", str(gates))
    for _ in range(2000):
        if path.exists():
            break
        await asyncio.sleep(0.01)
    client = GateClient(str(gates), 2)

    def gate(bound: int | None, machine: bool) -> ReplicaGate:
        kw: dict[str, Any] = {"fixed": bound, "read_slots": None if bound else _no_slots, "margin": 0,
                              "max_queue": 10**6, "queue_timeout": 60.0}
        return MachineGate(URL, client=client, **kw) if machine else ReplicaGate(URL, **kw)

    big = 10**6
    cases = {"no bound known, machine gate (no round trip)": gate(None, True),
             "bounded, local gate (ReplicaGate)": gate(big, False),
             "bounded, machine gate (service)": gate(big, True),
             "bound 4 (most wait), local gate": gate(4, False),
             "bound 4 (most wait), machine gate": gate(4, True)}
    await _run(cases["bounded, machine gate (service)"], 200, 1)  # connect, warm
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for _ in range(args.rounds):
            for concurrency in (1, args.concurrency):
                for name, g in cases.items():
                    if concurrency == 1 and name.startswith("bound 4"):
                        continue  # one at a time nobody waits: the same as the rows above
                    cpu0 = time.process_time() + _cpu(service.pid)
                    wall = await _run(g, args.n, concurrency)
                    cpu = time.process_time() + _cpu(service.pid) - cpu0
                    row = results.setdefault(f"{name}, c={concurrency}", {"wall_us": [], "cpu_us": []})
                    row["wall_us"].append(wall / args.n * 1e6)
                    row["cpu_us"].append(cpu / args.n * 1e6)
    finally:
        await client.aclose()
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
    print("| case | µs per generation (wall) | CPU µs per generation (gateway + service) |\n|---|---|---|")
    for name, row in out.items():
        print(f"| {name} | {row['wall_us']:.1f} | {row['cpu_us']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
