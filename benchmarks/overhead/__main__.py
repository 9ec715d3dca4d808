"""The overhead benchmark's command line: ``python -m benchmarks.overhead [--quick] [--json FILE]
[--tree A=PATH --tree B=PATH ...]`` (see the package docstring).

Markdown on stdout, progress on stderr; exits 1 when any request failed. ``make bench-overhead``: a full
run into ``benchmarks/results/overhead.md`` (the tables) and ``overhead.json`` (every number).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import benchmarks.overhead as package
from benchmarks.overhead.processes import start_fake, start_gateway
from benchmarks.overhead.report import comparison_markdown, markdown, setup_text
from benchmarks.overhead.runner import measure
from benchmarks.overhead.stats import compare, gateway_log_summary, summarize
from benchmarks.overhead.trees import ROOT, Tree, git_commit, parse_tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead",
                                     description=(package.__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="latency requests per target and round")
    parser.add_argument("--seconds", type=float, default=2.0, help="throughput seconds per target and round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=50, help="requests per target before round 0")
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens of the fake model")
    parser.add_argument("--ttft", type=float, default=0.0, help="fake's time to first token, seconds")
    parser.add_argument("--gap", type=float, default=0.0, help="fake's inter-token gap, seconds")
    parser.add_argument("--gateway-log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw",
                        help="load generator: raw asyncio HTTP/1.1 (default, cheap) or httpx.AsyncClient")
    parser.add_argument("--tree", type=parse_tree, action="append", metavar="LABEL=PATH",
                        help="run a gateway from this source tree (repeat to compare trees: each "
                             "further tree against the first); default: this file's tree")
    parser.add_argument("--json", type=Path, help="write all numbers to this file")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 round, 20 requests, 0.5 s per target")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests, args.seconds, args.warmup = 1, 20, 0.5, 10
    trees: list[Tree] = args.tree or [Tree.at("current", ROOT)]
    if len({t.label for t in trees}) != len(trees):
        parser.error("--tree labels must differ")
    ab = args.tree is not None
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(ROOT), "cpus": os.cpu_count(),
        "python": platform.python_version(), "loadavg_before": os.getloadavg()[:3],
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                 if k != "tree"},
        "trees": {t.label: {"path": str(t.path), "entry": t.entry, "commit": git_commit(t.path)}
                  for t in trees},
    }
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ocm-overhead-") as tmp, contextlib.ExitStack() as stack:
        fake = stack.enter_context(start_fake(args.tokens, args.ttft, args.gap, trees[0]))
        gateways = {t.label: stack.enter_context(start_gateway(fake, t, Path(tmp) / t.label,
                                                               args.gateway_log_level))
                    for t in trees}
        print(f"fake upstream {fake.urls}; gateways "
              + ", ".join(f"{k} {g.url} ({g.tree.path})" for k, g in gateways.items()),
              file=sys.stderr, flush=True)
        phases = asyncio.run(measure(fake, gateways, args))
        logs = {k: gateway_log_summary(g.log) for k, g in gateways.items()}
        configs = {k: g.config for k, g in gateways.items()}
        for k, g in gateways.items():
            meta["trees"][k]["imports"] = g.imported
    meta["loadavg_after"] = os.getloadavg()[:3]
    meta["elapsed_s"] = round(time.monotonic() - t0, 1)
    summaries = {t.label: summarize(phases, args.rounds, t.label) for t in trees}
    first = trees[0].label
    comparisons = {t.label: compare(phases, args.rounds, first, t.label) for t in trees[1:]}
    if not ab:
        print(f"## Gateway overhead over a fake upstream ({meta['date']}, commit {meta['commit']})"
              f"\n\n{setup_text(meta)}\n\n{markdown(summaries[first], meta, logs[first])}")
    else:
        print(f"## Gateway overhead over a fake upstream, {len(trees)} source trees "
              f"({meta['date']})\n\n{setup_text(meta)} With several trees: every gateway target "
              "once per tree and round, the trees back to back in a rotated order; the direct "
              "baselines once per round for all trees. Trees: "
              + "; ".join(f"**{k}** `{v['path']}` ({v['commit']})" for k, v in meta["trees"].items())
              + ".")
        for t in trees:
            print(f"\n## Tree {t.label} ({meta['trees'][t.label]['commit']})\n\n"
                  f"{markdown(summaries[t.label], meta, logs[t.label])}")
        for label, comparison in comparisons.items():
            print("\n" + comparison_markdown(comparison, first, label, args.concurrency))
    if args.json:
        if ab:
            out: dict[str, Any] = {
                "meta": meta,
                "trees": {t.label: {"gateway_config": configs[t.label], "summary": summaries[t.label],
                                    "gateway_log": logs[t.label]} for t in trees},
                "comparison": {f"{label} vs {first}": c for label, c in comparisons.items()}}
        else:
            out = {"meta": meta, "gateway_config": configs[first], "summary": summaries[first],
                   "gateway_log": logs[first]}
        out["phases"] = [asdict(p) for p in phases]
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    failed = sum(s["errors"] for summary in summaries.values() for s in summary.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
