"""Smoke tests of the overhead benchmark and its fake upstream, run as their command lines.

``python -m benchmarks.overhead --quick`` (the fake, a real gateway, one short round) must exit 0,
report zero failed requests and print its tables; ``python -m benchmarks.overhead.fake --verify``
must reproduce every recording. No timing is asserted: the numbers depend on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.overhead.fake.verify import VERIFY_CASES
from benchmarks.overhead.targets import TARGETS
from tests.support.paths import ROOT

TABLES = (
    "### Latency at concurrency 1",
    "### Throughput at concurrency",
    "### Connections accepted by the fake upstream",
)


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_quick_run_reports_no_errors_and_prints_the_tables(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    proc = _run("benchmarks.overhead", "--quick", "--json", str(out), timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    for heading in TABLES:
        assert heading in proc.stdout
    for target in TARGETS:  # a row per target in each table
        assert proc.stdout.count(f"| {target.label} |") == len(TABLES)
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {t.name for t in TARGETS}
    assert {name: s["errors"] for name, s in summary.items()} == dict.fromkeys(summary, 0)
    assert all(s["requests_ok"] > 0 and s["first_error"] is None for s in summary.values())


def test_fake_upstream_reproduces_the_recordings() -> None:
    proc = _run("benchmarks.overhead.fake", "--verify", timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.stdout.splitlines() == [f"ok   {case}" for case in VERIFY_CASES]
