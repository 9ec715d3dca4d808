"""``--sweep``: latency and throughput against concurrency.

After the rounds, the direct OpenAI chat request, the gateway's passthrough and Harmony
(non-stream) targets of every gateway (each tree, each ``--workers`` count) and, with ``--litellm``,
the LiteLLM proxy are measured at each concurrency of ``--sweep-concurrency`` (default 1, 4, 16,
32, 64) for ``--sweep-seconds`` each, in ``--sweep-rounds`` rounds with a rotated order; every
measured phase follows a short unmeasured one at the same concurrency (connections opened, pools
filled). Cells: median over rounds of p50 / p99 latency (client-side, request sent → last byte),
requests per second and the proxy's CPU time per request.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from benchmarks.overhead.targets import Phase, Target

SWEEP_TARGETS = ("direct", "passthrough", "harmony", "litellm")
CONCURRENCIES = (1, 4, 16, 32, 64)
SHORT = {"direct": "direct to fake", "passthrough": "gateway passthrough",
         "harmony": "gateway Harmony", "litellm": "LiteLLM passthrough"}
WARM_SECONDS = 0.3

# Runner.phase: (target, tree, round, kind, concurrency, requests, seconds, warm-up) -> Phase
PhaseFn = Callable[[Target, str | None, int, str, int, int, float, int], Awaitable[Phase]]


def series_of(trees: Sequence[str], targets: Sequence[Target]) -> list[tuple[Target, str | None]]:
    """What the sweep measures: each sweep target, a gateway target once per tree."""
    return [(t, tree) for t in targets if t.name in SWEEP_TARGETS
            for tree in (trees if t.server == "gateway" else [None])]


def series_label(target: str, tree: str | None, trees: int) -> str:
    name = SHORT.get(target, target)
    return f"{name} [{tree}]" if tree is not None and trees > 1 else name


async def sweep(phase: PhaseFn, progress: Callable[[Phase], None], trees: Sequence[str],
                targets: Sequence[Target], args: argparse.Namespace) -> list[Phase]:
    series = series_of(trees, targets)
    phases: list[Phase] = []
    for c in args.sweep_concurrency:
        for rnd in range(args.sweep_rounds):
            shift = (rnd + c) % len(series)
            for target, tree in series[shift:] + series[:shift]:
                await phase(target, tree, rnd, "sweep-warm", c, 0, WARM_SECONDS, 0)
                measured = await phase(target, tree, rnd, "sweep", c, 0, args.sweep_seconds, 0)
                phases.append(measured)
                progress(measured)
    return phases


def _median(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def sweep_summary(phases: list[Phase], trees: Sequence[str]) -> dict[str, Any]:
    """Per series (target and tree), per concurrency: medians over rounds, and the range."""
    out: dict[str, Any] = {}
    for p in phases:
        if p.kind != "sweep":
            continue
        label = series_label(p.target, p.tree, len(trees))
        entry = out.setdefault(label, {"target": p.target, "tree": p.tree, "by_concurrency": {}})
        entry["by_concurrency"].setdefault(str(p.concurrency), []).append(p)
    order = {name: i for i, name in enumerate(SWEEP_TARGETS)}
    out = dict(sorted(out.items(), key=lambda kv: (order.get(kv[1]["target"], 99),
                                                   list(trees).index(kv[1]["tree"])
                                                   if kv[1]["tree"] in trees else -1)))
    for entry in out.values():
        for c, group in entry["by_concurrency"].items():
            entry["by_concurrency"][c] = {
                "p50_ms": _median([p.p50_ms for p in group]),
                "p99_ms": _median([p.p99_ms for p in group]),
                "rps": _median([p.rps for p in group]),
                "rps_min": min(p.rps for p in group), "rps_max": max(p.rps for p in group),
                "proxy_cpu_us_per_req": _median([p.cpu_us_per_req["gateway"] for p in group]),
                "rounds": len(group), "ok": sum(p.ok for p in group),
                "errors": sum(p.errors for p in group),
            }
    return out


def sweep_markdown(summary: dict[str, Any], args: argparse.Namespace) -> str:
    cs = [str(c) for c in args.sweep_concurrency]
    head = "| target | " + " | ".join(f"c={c}" for c in cs) + " |\n|---|" + "---|" * len(cs)
    lines = [
        f"### Latency and throughput against concurrency (--sweep: {args.sweep_seconds} s per "
        f"target and concurrency, {args.sweep_rounds} rounds, median over rounds)",
    ]
    tables = (("p50 latency, ms", "p50_ms", 3), ("p99 latency, ms", "p99_ms", 3),
              ("requests per second", "rps", 0), ("proxy CPU µs per request", "proxy_cpu_us_per_req", 0))
    for title, key, digits in tables:
        lines += ["", f"**{title}**", "", head]
        for label, entry in summary.items():
            if key == "proxy_cpu_us_per_req" and entry["target"] == "direct":
                continue
            cells = []
            for c in cs:
                cell = entry["by_concurrency"].get(c)
                cells.append("n/a" if cell is None or math.isnan(cell[key])
                             else f"{cell[key]:.{digits}f}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    errors = {label: sum(c["errors"] for c in e["by_concurrency"].values())
              for label, e in summary.items()}
    if any(errors.values()):
        lines += ["", f"Failed requests in the sweep: {errors}"]
    return "\n".join(lines)
