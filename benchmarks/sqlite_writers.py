"""Does the embedded SQLite store need a single writer when ``--workers N`` share its file?

``python -m benchmarks.sqlite_writers [--rounds 3] [--seconds 3] [--concurrency 32]``: P
processes (1, then 2; interleaved rounds), each opening the SQLite response store on one file
(WAL) and writing ``--concurrency`` responses at a time for ``--seconds`` (a ~3 KB resource, the
two writes a stored response makes: ``put`` at the start and at the end). Reports writes/s over
all processes, p50 / p99 / max milliseconds of one ``put``, and how many ended as ``store_busy``
(the 503 a write gets past the store's bounded wait). Markdown to stdout; ``--json FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.core.errors import Overloaded
from app.stores.sqlite_responses import SqliteResponseStore

RESOURCE = {"object": "response", "status": "completed", "model": "bench", "created_at": 1_790_000_000,
            "output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "x" * 2500}]}]}


async def _writer(path: str, seconds: float, concurrency: int, tag: str) -> dict[str, Any]:
    store = await SqliteResponseStore.open(path)
    times: list[float] = []
    busy = 0
    end = time.monotonic() + seconds

    async def one(worker: int) -> None:
        nonlocal busy
        n = 0
        while time.monotonic() < end:
            n += 1
            rid = f"resp_{tag}_{worker}_{n}"
            for status in ("in_progress", "completed"):
                t0 = time.perf_counter()
                try:
                    await store.put({**RESOURCE, "id": rid, "status": status},
                                    [{"type": "message", "role": "user", "content": "hi"}], "bench")
                except Overloaded:
                    busy += 1
                times.append(time.perf_counter() - t0)

    try:
        await asyncio.gather(*(one(i) for i in range(concurrency)))
    finally:
        await store.close()
    return {"writes": len(times), "busy": busy, "times": times}


def _process(path: str, seconds: float, concurrency: int, tag: str, out: Any) -> None:
    result = asyncio.run(_writer(path, seconds, concurrency, tag))
    out.put(result)


def run(processes: int, path: str, args: argparse.Namespace, rnd: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_process, args=(path, args.seconds, args.concurrency,
                                                 f"r{rnd}p{processes}w{i}", out))
             for i in range(processes)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=args.seconds + 60) for _ in procs]
    for proc in procs:
        proc.join()
    times = sorted(t for r in results for t in r["times"])
    return {"writes_per_s": sum(r["writes"] for r in results) / args.seconds,
            "p50_ms": statistics.median(times) * 1e3,
            "p99_ms": times[int(len(times) * 0.99)] * 1e3, "max_ms": times[-1] * 1e3,
            "busy": sum(r["busy"] for r in results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sqlite_writers",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=32, help="writes in flight per process")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for processes in ((1, 2) if rnd % 2 == 0 else (2, 1)):
                path = os.path.join(tmp, f"r{rnd}-p{processes}.db")
                numbers = run(processes, path, args, rnd)
                results[processes].append(numbers)
                print(f"round {rnd}: {processes} process(es) {numbers}", flush=True, file=sys.stderr)

    def cell(key: str, rows: list[dict[str, float]]) -> str:
        values = [r[key] for r in rows]
        return f"{statistics.median(values):,.1f} [{min(values):,.1f}, {max(values):,.1f}]"

    print("| writer processes | writes/s (all) | put p50 ms | put p99 ms | put max ms | store_busy |")
    print("|---|---|---|---|---|---|")
    for processes, rows in results.items():
        print(f"| {processes} | {cell('writes_per_s', rows)} | {cell('p50_ms', rows)} | "
              f"{cell('p99_ms', rows)} | {cell('max_ms', rows)} | {sum(r['busy'] for r in rows):.0f} |")
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "loadavg": os.getloadavg(),
                "args": vars(args) | {"json": str(args.json)}}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
