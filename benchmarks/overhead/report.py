"""The markdown report: the setup paragraph, one tree's tables, and the B-vs-A comparison table
(two trees, or the gateway and LiteLLM)."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.overhead.targets import ALL_TARGETS


def fmt(value: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def fmt_range(s: dict[str, float], digits: int = 3, signed: bool = False) -> str:
    if math.isnan(s["median"]):
        return "n/a"
    sign = "+" if signed else ""
    return (f"{s['median']:{sign}.{digits}f} [{s['min']:{sign}.{digits}f}, "
            f"{s['max']:{sign}.{digits}f}]")


def setup_text(meta: dict[str, Any]) -> str:
    a = meta["args"]
    return (
        f"{meta['cpus']} CPUs, load average before {meta['loadavg_before']}, after "
        f"{meta['loadavg_after']}; Python {meta['python']}; load generator: {a['client']}. Answer: "
        f"{a['tokens']} tokens (+ Harmony markers), TTFT {a['ttft']} s, gap {a['gap']} s. "
        f"{a['rounds']} interleaved rounds; each: {a['requests']} sequential requests per target, "
        f"then {a['seconds']} s at concurrency {a['concurrency']} per target. Cells: median over "
        "rounds [min, max]. *Added* = gateway − its baseline, the direct request to the fake that "
        "the gateway makes for it (llama.cpp `/completion` stream for Harmony, OpenAI chat for "
        "passthrough), taken within each round; likewise the throughput ratio. *Proxy CPU*: the "
        "gateway's (all its processes), or LiteLLM's for the LiteLLM rows.")


def markdown(summary: dict[str, Any], meta: dict[str, Any], log: dict[str, Any]) -> str:
    """The report of one tree (without a title)."""
    a = meta["args"]
    labels = {t.name: t.label for t in ALL_TARGETS.values()}
    lines = [
        "### Latency at concurrency 1 (ms, request sent → last byte, client-side)",
        "",
        "| target | p50 | p99 | added p50 | added p99 | first byte p50 | proxy CPU µs/req |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary.values():
        lat = s["latency"]
        base = s["baseline"] is None
        lines.append(
            f"| {s['label']} | {fmt_range(lat['p50_ms'])} | {fmt_range(lat['p99_ms'])} | "
            f"{'—' if base else fmt_range(lat['added_p50_ms'], signed=True)} | "
            f"{'—' if base else fmt_range(lat['added_p99_ms'], signed=True)} | "
            f"{fmt(lat['first_byte_p50_ms']['median'])} | "
            f"{'—' if base else fmt(lat['gateway_cpu_us_per_req']['median'], 0)} |")
    lines += [
        "",
        f"### Throughput at concurrency {a['concurrency']}",
        "",
        "| target | req/s | × baseline | p50 ms | p99 ms | CPU µs/req proxy / fake / client |",
        "|---|---|---|---|---|---|",
    ]
    for s in summary.values():
        thr = s["throughput"]
        cpu = thr["cpu_us_per_req"]
        base = s["baseline"] is None
        lines.append(
            f"| {s['label']} | {fmt_range(thr['rps'], 0)} | "
            f"{'—' if base else fmt_range(thr['ratio_to_baseline'], 4)} | "
            f"{fmt(thr['p50_ms']['median'])} | {fmt(thr['p99_ms']['median'])} | "
            f"{'—' if base else fmt(cpu['gateway']['median'], 0)} / {fmt(cpu['fake']['median'], 0)}"
            f" / {fmt(cpu['client']['median'], 0)} |")
    lines += [
        "",
        "### Connections accepted by the fake upstream (all measured phases)",
        "",
        "| target | who → where | requests ok | errors | TCP connections | requests | "
        "requests / connection |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        up = s["upstream"]
        per = f"{up['requests'] / up['connections']:.1f}" if up["connections"] else "all reused"
        target = ALL_TARGETS[name]
        who = f"{target.server if target.server in ('gateway', 'litellm') else 'client'} → fake " \
              f"{target.upstream}"
        lines.append(f"| {s['label']} | {who} | {s['requests_ok']} | {s['errors']} | "
                     f"{up['connections']} | {up['requests']} | {per} |")
    errors = [(s["label"], s["first_error"]) for s in summary.values() if s["first_error"]]
    if errors:
        lines += ["", "First error per target:", ""] + [f"* {label}: `{err}`" for label, err in errors]
    own = log["own_overhead_ms_p50"]
    if own:
        lines += ["", "Gateway's own access log, p50 of `duration_ms - upstream_ms` at concurrency 1: "
                  + ", ".join(f"{labels.get(k, k)} {v:.3f} ms" for k, v in sorted(own.items()))]
    if log["levels"]:
        lines += ["", f"Gateway log: {log['levels']}", ""] + [f"    {x}" for x in log["samples"]]
    return "\n".join(lines)


def comparison_markdown(comparison: dict[str, Any], a: str, b: str, concurrency: int,
                        title: str | None = None, what: str = "both trees") -> str:
    lines = [
        title or f"## {b} vs {a}",
        "",
        f"Per round: {b} − {a} and {b} / {a} of the same metric, {what} measured back to back "
        "in that round (the added latencies against the same baseline phase, so the baseline "
        f"cancels in the difference); then median [min, max] over rounds. The last column: in how "
        f"many rounds {b}'s value was the higher one.",
        "",
        f"| target | metric | {a} | {b} | {b} − {a} | {b} / {a} | rounds {b} higher |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in comparison.values():
        for name, m in c["metrics"].items():
            digits = 0 if "cpu" in name or name == "rps" else 3
            lines.append(
                f"| {c['label']} | {m['label'].format(c=concurrency)} | {fmt_range(m['a'], digits)} | "
                f"{fmt_range(m['b'], digits)} | {fmt_range(m['diff'], digits, signed=True)} | "
                f"{fmt_range(m['ratio'], 3)} | {m['b_higher_rounds']}/{m['rounds']} |")
    return "\n".join(lines)
