"""The overhead benchmark's command line: ``python -m benchmarks.overhead [--quick] [--json FILE]
[--tree A=PATH --tree B=PATH ...] [--workers N] [--litellm] [--stream-passthrough] [--responses]
[--responses-store] [--messages]
[--sweep]``
(see the package docstring).

Markdown on stdout, progress on stderr; exits 1 when any request failed. ``make bench-overhead``: a full
run into ``benchmarks/results/overhead.md`` (the tables) and ``overhead.json`` (every number);
``make bench-litellm``: the same with LiteLLM, the sweep and two workers, ``make bench-plot``:
its sweep as ``docs/performance-latency.png``.
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
from benchmarks.overhead.proxy import Proxy, start_litellm
from benchmarks.overhead.report import comparison_markdown, markdown, setup_text
from benchmarks.overhead.runner import measure
from benchmarks.overhead.stats import compare, gateway_log_summary, summarize, versus_litellm
from benchmarks.overhead.sweep import CONCURRENCIES, sweep_markdown, sweep_summary
from benchmarks.overhead.targets import select_targets
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
    parser.add_argument("--workers", type=int, action="append", default=[], metavar="N",
                        help="also run the first tree's gateway with N uvicorn workers (labelled "
                             "LABEL-wN, compared with the one-worker gateway; repeatable)")
    parser.add_argument("--workers-nodelay", action="store_true",
                        help="with --workers: also each N-worker gateway with TCP_NODELAY on its "
                             "connections (a launcher patch; uvicorn's own socket lacks it)")
    parser.add_argument("--litellm", action="store_true",
                        help="also measure the LiteLLM proxy on the passthrough requests (non-stream "
                             "and stream; creates benchmarks/.venvs/litellm on first use)")
    parser.add_argument("--responses", action="store_true",
                        help="also measure /v1/responses (non-stream and stream) on the Harmony model")
    parser.add_argument("--responses-store", action="store_true",
                        help="also measure /v1/responses with store: true (non-stream and stream)")
    parser.add_argument("--messages", action="store_true",
                        help="also measure /v1/messages (non-stream and stream) on the Harmony model")
    parser.add_argument("--stream-passthrough", action="store_true",
                        help="also measure an OpenAI chat stream, direct and through the gateway")
    parser.add_argument("--sweep", action="store_true",
                        help="after the rounds: latency and req/s against concurrency")
    parser.add_argument("--sweep-concurrency", type=int, nargs="+", default=list(CONCURRENCIES))
    parser.add_argument("--sweep-seconds", type=float, default=2.0)
    parser.add_argument("--sweep-rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write all numbers to this file")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 round, 20 requests, 0.5 s per target (sweep: 0.3 s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests, args.seconds, args.warmup = 1, 20, 0.5, 10
        args.sweep_seconds, args.sweep_rounds = 0.3, 1
    trees: list[Tree] = args.tree or [Tree.at("current", ROOT)]
    trees += [trees[0].with_workers(n, nodelay) for n in args.workers if n != 1
              for nodelay in ((False, True) if args.workers_nodelay else (False,))]
    if len({t.label for t in trees}) != len(trees):
        parser.error("--tree labels must differ (and --workers counts)")
    targets = select_targets(args.stream_passthrough, args.litellm, args.responses, args.messages,
                             args.responses_store)
    ab = len(trees) > 1
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(ROOT), "cpus": os.cpu_count(),
        "python": platform.python_version(), "loadavg_before": os.getloadavg()[:3],
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                 if k != "tree"},
        "trees": {t.label: {"path": str(t.path), "entry": t.entry, "commit": git_commit(t.path),
                            "workers": t.workers, "nodelay": t.nodelay} for t in trees},
        "targets": [t.name for t in targets],
    }
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ocm-overhead-") as tmp, contextlib.ExitStack() as stack:
        fake = stack.enter_context(start_fake(args.tokens, args.ttft, args.gap, trees[0]))
        gateways = {t.label: stack.enter_context(start_gateway(fake, t, Path(tmp) / t.label,
                                                               args.gateway_log_level))
                    for t in trees}
        litellm: Proxy | None = None
        if args.litellm:
            litellm = stack.enter_context(start_litellm(fake, Path(tmp) / "litellm"))
            meta["litellm"] = {"version": litellm.version, "config": litellm.config}
        print(f"fake upstream {fake.urls}; gateways "
              + ", ".join(f"{k} {g.url} ({g.tree.path}, {g.tree.workers} worker(s))"
                          for k, g in gateways.items())
              + (f"; {litellm.version} {litellm.url}" if litellm else ""), file=sys.stderr, flush=True)
        phases = asyncio.run(measure(fake, gateways, litellm, targets, args))
        logs = {k: gateway_log_summary(g.log) for k, g in gateways.items()}
        configs = {k: g.config for k, g in gateways.items()}
        for k, g in gateways.items():
            meta["trees"][k]["imports"] = g.imported
    meta["loadavg_after"] = os.getloadavg()[:3]
    meta["elapsed_s"] = round(time.monotonic() - t0, 1)
    summaries = {t.label: summarize(phases, args.rounds, t.label, targets) for t in trees}
    first = trees[0].label
    comparisons = {t.label: compare(phases, args.rounds, first, t.label, targets) for t in trees[1:]}
    versus = versus_litellm(phases, args.rounds, first, targets) if args.litellm else {}
    sweep = sweep_summary(phases, [t.label for t in trees]) if args.sweep else {}
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
    if versus:
        print("\n" + comparison_markdown(
            versus, "gateway", "LiteLLM", args.concurrency, what="both proxies",
            title=f"## Gateway ({first}) vs LiteLLM proxy, the same passthrough request\n\n"
                  f"{meta['litellm']['version']}, one worker; config:\n\n```yaml\n"
                  f"{meta['litellm']['config']}```"))
    if sweep:
        print("\n" + sweep_markdown(sweep, args))
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
        if versus:
            out["gateway_vs_litellm"] = versus
        if sweep:
            out["sweep"] = sweep
        out["phases"] = [asdict(p) for p in phases]
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    failed = sum(s["errors"] for summary in summaries.values() for s in summary.values()) \
        + sum(c["errors"] for e in sweep.values() for c in e["by_concurrency"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
