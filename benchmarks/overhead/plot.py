"""``--sweep``'s numbers as a picture: ``python -m benchmarks.overhead.plot RESULT.json OUT.png``.

Two panels against concurrency (log-2 x axis): p50 latency (log y, p99 as a faint line of the
same style) and requests per second, one line per target of the sweep (``sweep`` in the JSON of
``python -m benchmarks.overhead --sweep --json RESULT.json``). Needs matplotlib, which is not a
dependency of the project: run it with the benchmarks' side virtualenv
(``benchmarks/.venvs/litellm/bin/python``, ``make bench-plot``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLOURS = {"direct": "tab:blue", "passthrough": "tab:orange", "harmony": "tab:purple",
           "litellm": "tab:gray"}
STYLES = [("-", "o"), ("--", "s"), ("-.", "^"), (":", "D")]  # per gateway tree, in order


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib  # type: ignore[import-not-found,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]

    sweep: dict[str, Any] = result["sweep"]
    meta = result["meta"]
    trees = list(meta["trees"])
    fig, (lat, thr) = plt.subplots(1, 2, figsize=(12, 5))
    for label, entry in sweep.items():
        cells = sorted(((int(c), v) for c, v in entry["by_concurrency"].items()), key=lambda x: x[0])
        cs = [c for c, _ in cells]
        style, marker = STYLES[trees.index(entry["tree"]) % len(STYLES)] if entry["tree"] in trees \
            else STYLES[0]
        look = {"color": COLOURS.get(entry["target"]), "linestyle": style}
        lat.plot(cs, [v["p50_ms"] for _, v in cells], marker=marker, label=label, **look)
        lat.plot(cs, [v["p99_ms"] for _, v in cells], alpha=0.3, linewidth=1, **look)
        thr.plot(cs, [v["rps"] for _, v in cells], marker=marker, label=label, **look)
    for ax in (lat, thr):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.grid(True, which="both", alpha=0.3)
        ticks = sorted({int(c) for e in sweep.values() for c in e["by_concurrency"]})
        ax.set_xticks(ticks, [str(t) for t in ticks])
    lat.set_yscale("log")
    lat.set_ylabel("latency, ms (p50 with markers, p99 faint)")
    lat.set_title("Latency against concurrency")
    thr.set_yscale("log")
    thr.set_ylabel("requests / s")
    thr.set_title("Throughput against concurrency")
    thr.legend(fontsize=8, loc="best")
    a = meta["args"]
    fig.suptitle(f"Fake upstream ({a['tokens']}-token answer, TTFT {a['ttft']} s, gap {a['gap']} s), "
                 f"{meta['cpus']} CPUs shared "
                 f"with the load generator; {a['sweep_seconds']} s per point, median of "
                 f"{a['sweep_rounds']} rounds ({meta['date']}, {meta['commit']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    result = json.loads(Path(args[0]).read_text())
    if "sweep" not in result:
        print(f"{args[0]} has no sweep: run python -m benchmarks.overhead --sweep --json FILE",
              file=sys.stderr)
        return 1
    plot(result, Path(args[1]))
    print(f"wrote {args[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
