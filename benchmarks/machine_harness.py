"""What the machine-service benchmarks (:mod:`benchmarks.machine_counters`,
:mod:`benchmarks.machine_gate`) share: the machine service as a process of its own
(``python -m app.http.machine_counters``), a case run ``n`` times one at a time and
``concurrency`` at a time with the CPU of this process and of the service, the interleaved
rounds, and the command line.

``--n 5000 --rounds 3 --concurrency 32 [--json FILE]``: the benchmark's cases, round after round,
µs per request (wall) and CPU µs per request (this process + the service's, from /proc),
medians over the rounds; Markdown to stdout.

``--tree LABEL=PATH`` (twice or more): the same cases against each tree's ``app``, each in a
subprocess of its own (:func:`benchmarks.inprocess.run_worker`: the tree's ``app``, this
checkout's benchmark), tree after tree in every round; each tree's numbers (median [min, max])
and their ratio to the first tree's, round by round (:func:`benchmarks.inprocess.ratio_table`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from benchmarks.inprocess import ratio_table, run_worker, write_rounds
from benchmarks.loadstats import cpu_seconds
from benchmarks.overhead.trees import parse_tree

Case = Callable[[int], Awaitable[None]]  # the i-th request of a case
Results = dict[str, dict[str, float]]  # case -> {"wall_us": ..., "cpu_us": ...}
Measure = Callable[[argparse.Namespace], Coroutine[Any, Any, Results]]

WORKER = """
import argparse, asyncio, importlib, json, sys
import app  # the tree's (its directory is the working directory and PYTHONPATH)
sys.path.insert(0, sys.argv[1])
bench = importlib.import_module(sys.argv[2])
del sys.path[0]
print(json.dumps(asyncio.run(bench.measure(argparse.Namespace(**json.loads(sys.argv[3]))))))
"""


@contextlib.asynccontextmanager
async def machine_service(*more: str) -> AsyncIterator[tuple[int, Path]]:
    """The machine service, in a directory of its own, until the block ends (then killed, the
    directory removed): its pid and the directory, its counters' socket there as ``c.sock``
    (``more``: the rest of its arguments, GRACE SIGNALS METRICS GATES, as names in it)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-machine-"))
    path = directory / "c.sock"
    sockets = [str(directory / name) if name else "" for name in more[1:]]
    service = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.http.machine_counters", str(path), "900", str(os.getpid()),
        *more[:1], *sockets)
    try:
        for _ in range(2000):  # until it accepts (the socket file is there just before it listens)
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_unix_connection(str(path))
                writer.close()
                break
            await asyncio.sleep(0.01)
        yield service.pid, directory
    finally:
        service.kill()
        await service.wait()
        shutil.rmtree(directory, ignore_errors=True)


async def timed(one: Case, n: int, concurrency: int) -> float:
    """Seconds for ``n`` requests of ``one``, ``concurrency`` at a time."""
    if concurrency == 1:
        t0 = time.perf_counter()
        for i in range(n):
            await one(i)
        return time.perf_counter() - t0
    sem = asyncio.Semaphore(concurrency)

    async def bounded(i: int) -> None:
        async with sem:
            await one(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(bounded(i) for i in range(n)))
    return time.perf_counter() - t0


async def interleaved(cases: dict[str, Case], service: int, args: argparse.Namespace,
                      skip: Callable[[str, int], bool] = lambda name, concurrency: False) -> Results:
    """Every case (but those ``skip`` names) one at a time and ``args.concurrency`` at a time,
    ``args.rounds`` rounds; the medians per request, CPU including the ``service`` process's."""
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for concurrency in (1, args.concurrency):
            for name, one in cases.items():
                if skip(name, concurrency):
                    continue
                cpu0 = time.process_time() + cpu_seconds([service])
                wall = await timed(one, args.n, concurrency)
                cpu = time.process_time() + cpu_seconds([service]) - cpu0
                row = results.setdefault(f"{name}, c={concurrency}", {"wall_us": [], "cpu_us": []})
                row["wall_us"].append(wall / args.n * 1e6)
                row["cpu_us"].append(cpu / args.n * 1e6)
    return {name: {k: statistics.median(v) for k, v in row.items()} for name, row in results.items()}


def cli(module: str, measure: Measure, unit: str) -> None:
    """The command line of the benchmark ``module`` (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tree", type=parse_tree, action="append", default=[])
    parser.add_argument("--json")
    args = parser.parse_args()
    if not args.tree:
        out = asyncio.run(measure(args))
        print(f"| case | µs per {unit} (wall) | CPU µs per {unit} (gateway + service) |\n|---|---|---|")
        for name, row in out.items():
            print(f"| {name} | {row['wall_us']:.1f} | {row['cpu_us']:.1f} |")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return
    one_round = json.dumps({"n": args.n, "rounds": 1, "concurrency": args.concurrency})
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):  # the trees' order alternates from round to round
        order = args.tree if number % 2 == 0 else args.tree[::-1]
        rounds.append({tree.label: run_worker(tree, WORKER, module, one_round) for tree in order})
    labels = [tree.label for tree in args.tree]
    for column, title in (("wall_us", "wall"), ("cpu_us", "CPU (gateway + service)")):
        print(f"\n{title} µs per {unit}, median [min, max] over {args.rounds} rounds:\n")
        print("\n".join(ratio_table("case", labels, rounds, _column(column), 1, lower=True)))
    if args.json:
        write_rounds(Path(args.json), args.tree, rounds)


def _column(name: str) -> Callable[[dict[str, float]], float]:
    return lambda row: float(row[name])
