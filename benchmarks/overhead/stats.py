"""Turning phases into numbers: per-tree summaries against the direct baselines, the comparison
of two trees (or of the gateway and LiteLLM) round by round, and the gateway's own log (errors,
its view of its overhead)."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.overhead.targets import ALL_TARGETS, LITELLM_PAIRS, UPSTREAM_COUNTERS, Phase, Target


def _spread(values: Sequence[float]) -> dict[str, float]:
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean)}


PhaseKey = tuple[str, str | None, str, int]  # target, tree, kind, round


def index(phases: list[Phase]) -> dict[PhaseKey, Phase]:
    return {(p.target, p.tree, p.kind, p.round): p for p in phases}


def tree_of(target: Target, tree: str) -> str | None:
    """The tree a target's phases carry: ``tree`` for a gateway target, None for the others."""
    return tree if target.server == "gateway" else None


def summarize(phases: list[Phase], rounds: int, tree: str, targets: Sequence[Target],
              ) -> dict[str, Any]:
    """Per target, the gateway targets of ``tree`` (and LiteLLM's) against the (shared) direct
    baselines."""
    by = index(phases)
    out: dict[str, Any] = {}
    for target in targets:
        t = target.name
        where = tree_of(target, tree)
        base = target.baseline or t
        lat = [by[(t, where, "latency", r)] for r in range(rounds)]
        thr = [by[(t, where, "throughput", r)] for r in range(rounds)]
        base_lat = [by[(base, None, "latency", r)] for r in range(rounds)]
        base_thr = [by[(base, None, "throughput", r)] for r in range(rounds)]
        direct_lat = [by[("direct", None, "latency", r)] for r in range(rounds)]
        mine = [p for p in phases if p.target == t and p.tree == where]
        up = {d: {k: sum(p.upstream[d][k] for p in mine) for k in UPSTREAM_COUNTERS}
              for d in ("llamacpp", "openai")}
        pairs = list(zip(lat, base_lat, strict=True))
        out[t] = {
            "label": target.label,
            "baseline": target.baseline,
            "latency": {
                "p50_ms": _spread([p.p50_ms for p in lat]),
                "p99_ms": _spread([p.p99_ms for p in lat]),
                "first_byte_p50_ms": _spread([p.first_byte_p50_ms for p in lat]),
                "added_p50_ms": _spread([p.p50_ms - b.p50_ms for p, b in pairs]),
                "added_p99_ms": _spread([p.p99_ms - b.p99_ms for p, b in pairs]),
                "added_p50_vs_direct_ms": _spread([p.p50_ms - d.p50_ms
                                                   for p, d in zip(lat, direct_lat, strict=True)]),
                "gateway_cpu_us_per_req": _spread([p.cpu_us_per_req["gateway"] for p in lat]),
            },
            "throughput": {
                "rps": _spread([p.rps for p in thr]),
                "ratio_to_baseline": _spread([p.rps / b.rps if b.rps else math.nan
                                              for p, b in zip(thr, base_thr, strict=True)]),
                "p50_ms": _spread([p.p50_ms for p in thr]),
                "p99_ms": _spread([p.p99_ms for p in thr]),
                "cpu_us_per_req": {k: _spread([p.cpu_us_per_req[k] for p in thr])
                                   for k in ("gateway", "idle_gateways", "fake", "client")},
            },
            "requests_ok": sum(p.ok for p in mine),
            "errors": sum(p.errors for p in mine),
            "first_error": next((p.first_error for p in mine if p.first_error), None),
            "upstream": up[target.upstream],
        }
    return out


@dataclass(frozen=True)
class Metric:
    """A number compared between trees: of which phase kind, and how it is taken from a gateway
    phase and its round's baseline phase."""

    kind: str
    label: str  # ``{c}``: the throughput concurrency
    value: Callable[[Phase, Phase], float]
    stream_only: bool = False


COMPARED = {
    "added_p50_ms": Metric("latency", "added p50 ms, c=1", lambda p, b: p.p50_ms - b.p50_ms),
    "added_p99_ms": Metric("latency", "added p99 ms, c=1", lambda p, b: p.p99_ms - b.p99_ms),
    "first_byte_p50_ms": Metric("latency", "first byte p50 ms, c=1",
                                lambda p, b: p.first_byte_p50_ms, stream_only=True),
    "rps": Metric("throughput", "req/s, c={c}", lambda p, b: p.rps),
    "gateway_cpu_us_per_req_c1": Metric("latency", "gateway CPU µs/req, c=1",
                                        lambda p, b: p.cpu_us_per_req["gateway"]),
    "gateway_cpu_us_per_req": Metric("throughput", "gateway CPU µs/req, c={c}",
                                     lambda p, b: p.cpu_us_per_req["gateway"]),
}


Series = tuple[str, str | None]  # target, tree


def _metrics(by: dict[PhaseKey, Phase], a: Series, b: Series, target: Target, rounds: int,
             ) -> dict[str, Any]:
    """Each compared metric of ``b``'s phases against ``a``'s: both values, the difference b - a
    and the ratio b / a taken within each round (then median, min, max over rounds), and the
    number of rounds in which b was higher. Added latencies are taken against ``target``'s
    baseline phase of the same round for both, so the baseline cancels in the difference."""
    assert target.baseline is not None
    metrics: dict[str, Any] = {}
    for name, metric in COMPARED.items():
        if metric.stream_only and not target.stream:
            continue
        base = [by[(target.baseline, None, metric.kind, r)] for r in range(rounds)]
        va = [metric.value(by[(*a, metric.kind, r)], base[r]) for r in range(rounds)]
        vb = [metric.value(by[(*b, metric.kind, r)], base[r]) for r in range(rounds)]
        diff = [y - x for x, y in zip(va, vb, strict=True)]
        metrics[name] = {
            "label": metric.label, "a": _spread(va), "b": _spread(vb), "diff": _spread(diff),
            "ratio": _spread([y / x if x > 0 else math.nan for x, y in zip(va, vb, strict=True)]),
            "b_higher_rounds": sum(d > 0 for d in diff), "rounds": rounds,
            "per_round": {"a": va, "b": vb},
        }
    return metrics


def compare(phases: list[Phase], rounds: int, a: str, b: str, targets: Sequence[Target],
            ) -> dict[str, Any]:
    """Tree ``b`` against tree ``a``, per gateway target and metric (see :func:`_metrics`)."""
    by = index(phases)
    return {t.name: {"label": t.label, "metrics": _metrics(by, (t.name, a), (t.name, b), t, rounds)}
            for t in targets if t.server == "gateway" and t.baseline is not None}


def versus_litellm(phases: list[Phase], rounds: int, tree: str, targets: Sequence[Target],
                   ) -> dict[str, Any]:
    """LiteLLM (b) against the gateway of ``tree`` (a), sent the same request, per metric."""
    by = index(phases)
    names = {t.name for t in targets}
    return {gw: {"label": ALL_TARGETS[gw].label.replace("gateway → ", ""),
                 "metrics": _metrics(by, (gw, tree), (lite, None), ALL_TARGETS[gw], rounds)}
            for gw, lite in LITELLM_PAIRS if gw in names and lite in names}


def gateway_log_summary(path: Path) -> dict[str, Any]:
    """Error / warning lines of the gateway's log, and its own account of the time spent outside
    the upstream (``duration_ms - upstream_ms`` of the JSON access log), per target."""
    levels: dict[str, int] = {}
    samples: list[str] = []
    own: dict[str, list[float]] = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entry = json.loads(line)
                rid = str(entry.get("request_id", ""))
                if rid.startswith("bench-") and "-r-1-" not in rid and "-warm-" not in rid \
                        and "-latency-" in rid and entry.get("upstream_ms"):
                    name = rid.split("-")[1]
                    own.setdefault(name, []).append(float(entry["duration_ms"]) - float(entry["upstream_ms"]))
            continue
        for level in ("CRITICAL", "ERROR", "WARNING", "Traceback"):
            if level in line:
                levels[level] = levels.get(level, 0) + 1
                if len(samples) < 8:
                    samples.append(line[:300])
                break
    return {"levels": levels, "samples": samples,
            "own_overhead_ms_p50": {k: statistics.median(v) for k, v in own.items()}}
