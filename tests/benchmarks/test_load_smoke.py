"""Smoke test of the load benchmark, run as its command line with 50 short streams.

``python -m benchmarks.load --streams 50`` (its own fake upstream, a real gateway, a direct and a
gateway phase) must exit 0, finish every stream in both phases, print both tables and write the
JSON it describes, with the gateway as shipped (``serve``'s own worker count, each worker's
share). No timing is asserted: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.cli.workers import available_cpus
from tests.support.paths import ROOT


def test_fifty_streams_finish_and_every_number_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.load", "--streams", "50", "--tokens", "5", "--ttft", "0.05",
         "--gap", "0.02", "--timeout", "60", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert "### Phases" in proc.stdout and "### Gateway" in proc.stdout
    assert "| 50 | direct | 50 | 0 | 0 |" in proc.stdout
    assert "| 50 | gateway | 50 | 0 | 0 |" in proc.stdout
    (run,) = json.loads(out.read_text())["runs"]
    for phase in (run["direct"], run["gateway"]):
        assert (phase["completed"], phase["errors"], phase["first_error"]) == (50, 0, None)
        assert all(phase["ttfb_event_ms"][k] is not None for k in ("p50", "p99", "max"))
        assert phase["ttfb_event_ms"]["p50"] <= phase["ttfb_event_ms"]["max"]
    gateway = run["gateway"]
    # as shipped: serve's own --workers auto (a worker per CPU here, with the file store it gets)
    assert gateway["workers"] == available_cpus()[0]
    assert len(gateway["worker_cpu_s"]) == len(gateway["worker_peak_fds"]) == gateway["workers"]
    assert sum(gateway["worker_cpu_s"]) > 0 and min(gateway["worker_peak_fds"]) > 0
    assert f"gateway workers {gateway['workers']} (serve's default, --workers auto)" in proc.stdout
    assert set(gateway["tcp"]) == {"ListenOverflows", "ListenDrops", "TCPSynRetrans"}
    assert gateway["rss_peak_mb"] > 0 and gateway["rss_hwm_mb"] >= gateway["rss_idle_mb"] > 0
    assert gateway["cpu_s"]["gateway"] > 0
    assert set(run["added_ttfb_ms"]) == {"p50", "p99", "max"}
