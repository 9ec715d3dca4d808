"""The gateway's CPU per request without the HTTP server and the load generator in its way:
each source tree's app called in-process as an ASGI app (:mod:`benchmarks.inprocess`; the whole
middleware stack, routing, body, engine and the upstream request to the overhead benchmark's
fake), CPU time of that process per request, trees interleaved in rounds.

``python -m benchmarks.request_cpu --tree before=PATH --tree now=PATH [--rounds 6]
[--requests 1500] [--targets harmony harmony_stream ...]``

Why: on a loaded shared machine the overhead benchmark's numbers move by ±10 % between rounds,
more than a change of a few percent of a request's CPU; one process on its own, timed with
``time.process_time`` (its threads included), moves far less.  The uvicorn protocol and the
client's sockets are not in it (``benchmarks.overhead`` measures those).  Each tree runs in a
subprocess of its own (``cwd`` and ``PYTHONPATH``: its ``app``), the fake is shared.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.inprocess import ratio_table, run_worker, write_rounds
from benchmarks.overhead.processes import start_fake
from benchmarks.overhead.runner import rotated
from benchmarks.overhead.targets import ALL_TARGETS
from benchmarks.overhead.trees import Tree, parse_tree

DEFAULT_TARGETS = ("harmony", "harmony_stream", "passthrough", "responses", "responses_store", "messages")

# ``python -c WORKER ROOT CONFIG ARGS_JSON``: one tree's app, its CPU per request for each target
WORKER = r'''
import asyncio, json, sys, time
root, config_path, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
from app.config import load_config
from app.main import create_app
sys.path.insert(0, root)
from benchmarks.overhead.targets import ALL_TARGETS
from benchmarks.inprocess import asgi_post
del sys.path[0]


async def call(app, path, raw, check):
    status, body = await asgi_post(app, path, raw)
    if status != 200 or check not in body:
        raise RuntimeError(f"{path}: HTTP {status}: {body[:300]!r}")


async def measure(app, target, n, concurrency):
    raw, path = target.body([]), target.path
    check = {"responses": b"completed", "messages": b"end_turn"}.get(target.api, b"stop")
    left = n

    async def worker():
        nonlocal left
        while left > 0:
            left -= 1
            await call(app, path, raw, check)

    await asyncio.gather(*(worker() for _ in range(min(args["warmup"], n))))
    left = n
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"cpu_us": (time.process_time() - cpu) / n * 1e6,
            "wall_us": (time.perf_counter() - wall) / n * 1e6}


async def main():
    app = create_app(load_config(config_path))
    out = {}
    async with app.router.lifespan_context(app):
        for name in args["targets"]:
            for c in args["concurrency"]:
                out[f"{name}@c{c}"] = await measure(app, ALL_TARGETS[name], args["requests"], c)
    print(json.dumps(out))


asyncio.run(main())
'''


def run_tree(tree: Tree, config: Path, args: dict[str, Any]) -> dict[str, dict[str, float]]:
    result: dict[str, dict[str, float]] = run_worker(tree, WORKER, str(config), json.dumps(args))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.request_cpu",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", type=parse_tree, action="append", metavar="LABEL=PATH", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=1500,
                        help="requests per target, concurrency and round")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("--targets", nargs="+", default=list(DEFAULT_TARGETS), choices=sorted(ALL_TARGETS))
    parser.add_argument("--json", type=Path, help="write every round's numbers here")
    args = parser.parse_args(argv)
    trees: list[Tree] = args.tree
    worker_args = {"targets": args.targets, "requests": args.requests, "warmup": args.warmup,
                   "concurrency": args.concurrency}
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    with tempfile.TemporaryDirectory(prefix="ocm-request-cpu-") as tmp, \
            start_fake(args.tokens, 0.0, 0.0, trees[0]) as fake:
        from benchmarks.overhead.processes import gateway_config
        config = Path(tmp) / "gateway.toml"
        config.write_text(gateway_config(0, fake))
        for rnd in range(args.rounds):
            results = {}
            for tree in rotated(trees, rnd):
                results[tree.label] = run_tree(tree, config, worker_args)
                line = ", ".join(f"{k} {v['cpu_us']:.0f}" for k, v in results[tree.label].items())
                print(f"round {rnd} {tree.label}: {line}", file=sys.stderr, flush=True)
            rounds.append(results)
    print(f"CPU µs per request, in-process (median of {args.rounds} rounds [min, max]); ratio: the "
          "same round's\n")
    print("\n".join(ratio_table("target", [t.label for t in trees], rounds, lambda v: float(v["cpu_us"]), 0,
                                lower=True)))
    if args.json:
        write_rounds(args.json, trees, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
