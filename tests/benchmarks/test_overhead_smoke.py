"""Smoke tests of the overhead benchmark and its fake upstream, run as their command lines.

``python -m benchmarks.overhead --quick`` (the fake, a real gateway, one short round) must exit 0,
report zero failed requests and print its tables, also with the streaming passthrough targets and
a short ``--sweep``; ``python -m benchmarks.overhead.fake --verify`` must reproduce every
recording. LiteLLM and matplotlib are optional (a side virtualenv) and not used here: only the
LiteLLM config is checked. No timing is asserted: the numbers depend on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.overhead.fake.verify import VERIFY_CASES
from benchmarks.overhead.processes import Fake
from benchmarks.overhead.proxy import litellm_config
from benchmarks.overhead.targets import TARGETS, select_targets
from benchmarks.overhead.trees import Tree
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


def test_stream_passthrough_and_sweep_run_without_litellm(tmp_path: Path) -> None:
    """The optional targets and ``--sweep`` (LiteLLM and matplotlib are not needed for them)."""
    out = tmp_path / "overhead.json"
    proc = _run("benchmarks.overhead", "--quick", "--stream-passthrough", "--sweep",
                "--sweep-concurrency", "1", "4", "--sweep-seconds", "0.2", "--json", str(out),
                timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    assert set(result["summary"]) == {t.name for t in select_targets(True, False)}
    assert result["summary"]["passthrough_stream"]["errors"] == 0
    sweep = result["sweep"]
    assert set(sweep) == {"direct to fake", "gateway passthrough", "gateway Harmony"}
    for entry in sweep.values():
        assert set(entry["by_concurrency"]) == {"1", "4"}
        assert all(c["ok"] > 0 and c["errors"] == 0 for c in entry["by_concurrency"].values())
    assert "### Latency and throughput against concurrency" in proc.stdout
    no_sweep = tmp_path / "no-sweep.json"
    no_sweep.write_text(json.dumps({"meta": result["meta"]}))
    plot = _run("benchmarks.overhead.plot", str(no_sweep), str(tmp_path / "x.png"), timeout=30)
    assert plot.returncode == 1 and "has no sweep" in plot.stderr  # matplotlib only imported to draw


def test_litellm_config_and_workers_labels() -> None:
    fake = Fake(None, {"openai": "http://127.0.0.1:9", "llamacpp": "", "control": ""}, "")  # type: ignore[arg-type]
    config = litellm_config(fake)
    assert "model: openai/tiny" in config and "api_base: http://127.0.0.1:9/v1" in config
    assert "disable_spend_logs: true" in config and "telemetry: false" in config
    tree = Tree("current", ROOT, "app.cli.main:main")
    assert tree.with_workers(2).label == "current-w2"
    assert tree.with_workers(2, nodelay=True).label == "current-w2-nodelay"
    names = [t.name for t in select_targets(False, True)]
    assert names[-4:] == ["direct_stream", "passthrough_stream", "litellm", "litellm_stream"]
