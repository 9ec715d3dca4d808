"""``serve --workers N|auto``: parsing, the CPUs this process may use, and what serve passes on."""

from __future__ import annotations

import argparse
import os
import resource
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.cli import limits_service, supervisor, workers
from app.cli import main as cli_main
from app.cli.parser import build_parser
from app.items import sealing


def test_the_option_takes_a_positive_count_or_auto() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--workers", "auto"]).workers == "auto"
    assert parser.parse_args(["serve", "--workers", "AUTO"]).workers == "auto"
    assert parser.parse_args(["serve", "--workers", "3"]).workers == 3
    assert parser.parse_args(["serve"]).workers is None  # unset: OCMGW_WORKERS, config, then 1
    for bad in ("0", "-2", "two", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            workers.parse_workers(bad)


def test_a_usage_error_for_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["serve", "--workers", "many"]) == 2
    assert "positive integer or 'auto'" in capsys.readouterr().err


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "50000 100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbage\n"}, None),
    ({}, None),
])
def test_the_cgroup_quota_v2_and_v1(tmp_path: Path, files: dict[str, str], quota: float | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert workers.cgroup_quota(tmp_path) == quota


def test_available_cpus_is_the_affinity_capped_by_the_quota(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert workers.available_cpus(tmp_path) == (4, "4 CPUs in this process's affinity mask")
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: two processes can use them
    assert workers.available_cpus(tmp_path) == (2, "4 CPUs in this process's affinity mask, "
                                                   "cgroup CPU quota 1.5")
    (tmp_path / "cpu.max").write_text("20000 100000\n")
    assert workers.available_cpus(tmp_path)[0] == 1
    (tmp_path / "cpu.max").write_text("800000 100000\n")  # a quota above the affinity: the affinity
    assert workers.available_cpus(tmp_path)[0] == 4


def test_auto_is_one_when_workers_could_not_share_their_state() -> None:
    cpus = (4, "4 CPUs")
    assert workers.choose("auto", store_path=":memory:", store_url=None, embedded=False,
                          cpus=cpus) == (1, "the store is :memory:, which worker processes cannot share")
    assert workers.choose("auto", store_path="/data/r.sqlite3", store_url=None, embedded=True,
                          cpus=cpus)[0] == 1
    assert workers.choose("auto", store_path="/data/r.sqlite3", store_url=None, embedded=False,
                          cpus=cpus) == (4, "4 CPUs")
    # PostgreSQL holds the state: the unused :memory: path does not matter
    assert workers.choose("auto", store_path=":memory:", store_url="postgresql://db/x", embedded=False,
                          cpus=cpus)[0] == 4
    assert workers.choose(3, store_path=":memory:", store_url=None, embedded=False,
                          cpus=cpus) == (3, "--workers")


def test_auto_is_capped_by_a_count_and_by_the_memory(tmp_path: Path) -> None:
    """A 64-core host does not start 64 workers of ~176 MB idle each; a container limited to
    512 MB with 4 CPUs gets 1, not 4 and an OOM kill."""
    plenty = (64 << 30, "host memory")
    assert workers.auto_count((2, "2 CPUs"), plenty) == (2, "2 CPUs")
    assert workers.auto_count((64, "64 CPUs"), plenty) == (8, "64 CPUs, at most 8 with auto")
    assert workers.auto_count((4, "4 CPUs"), (512 << 20, "cgroup memory limit")) == (
        1, "4 CPUs, cgroup memory limit 512 MiB allows 1 at 320 MiB each")
    assert workers.auto_count((4, "4 CPUs"), (1 << 30, "cgroup memory limit"))[0] == 2
    assert workers.auto_count((4, "4 CPUs"), (64 << 20, "cgroup memory limit"))[0] == 1  # never 0
    assert workers.auto_count((4, "4 CPUs"), None) == (4, "4 CPUs")
    assert workers.choose("auto", store_path="/d/r.sqlite3", store_url=None, embedded=False,
                          cpus=(16, "16 CPUs"), memory=(2 << 30, "host memory"))[0] == 6
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684092 kB\nMemFree:  1 kB\n")
    assert workers.memory_limit(tmp_path, meminfo) == (24684092 * 1024, "host memory")
    (tmp_path / "memory.max").write_text("max\n")  # v2 without a limit: the host's
    assert workers.memory_limit(tmp_path, meminfo)[1] == "host memory"  # type: ignore[index]
    (tmp_path / "memory.max").write_text("536870912\n")
    assert workers.memory_limit(tmp_path, meminfo) == (512 << 20, "cgroup memory limit")
    (tmp_path / "memory.max").unlink()
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1: none
    assert workers.memory_limit(tmp_path, meminfo)[1] == "host memory"  # type: ignore[index]
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("1073741824\n")
    assert workers.memory_limit(tmp_path, meminfo) == (1 << 30, "cgroup memory limit")
    assert workers.memory_limit(tmp_path / "none", tmp_path / "none") is None


def _serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: str, *argv: str) -> dict[str, Any]:
    for name in [n for n in os.environ if n.startswith("OCMGW")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OCMGW_MODEL", "m")
    monkeypatch.setenv("OCMGW_BACKEND_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OCMGW__store__path", store)
    monkeypatch.setenv(sealing.SERVE_KEY_ENV, "")  # whatever serve sets is undone after the test
    monkeypatch.setattr(workers, "available_cpus", lambda: (3, "3 CPUs in this process's affinity mask"))
    monkeypatch.setattr(workers, "memory_limit", lambda: (16 << 30, "host memory"))
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw, run="uvicorn"))
    monkeypatch.setattr(supervisor, "run", lambda *a, **kw: seen.update(kw, run="supervisor"))
    monkeypatch.setattr(limits_service, "start", lambda n, cfg: seen.update(limits_service=n))
    assert cli_main.main(["serve", *argv]) == 0
    return seen


def test_serve_auto_runs_the_counted_workers_and_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    seen = _serve(monkeypatch, tmp_path, str(tmp_path / "r.sqlite3"), "--workers", "auto")
    assert seen["workers"] == 3 and seen["limits_service"] == 3  # limits counted once for the 3
    assert ("--workers auto: 3 workers (3 CPUs in this process's affinity mask)"
            in capsys.readouterr().err)
    assert _serve(monkeypatch, tmp_path, ":memory:", "--workers", "auto")["workers"] == 1
    assert "--workers auto: 1 worker (the store is :memory:" in capsys.readouterr().err
    assert _serve(monkeypatch, tmp_path, ":memory:", "--workers", "2")["workers"] == 2
    assert _serve(monkeypatch, tmp_path, ":memory:")["workers"] == 1
    assert "--workers auto" not in capsys.readouterr().err


def test_serve_raises_the_open_files_limit_for_its_connections(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """The defaults can open 2,304 client connections and 1,024 upstream ones per worker: a soft
    limit of 1,024 (the common default) is raised towards the hard limit before serving."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2304 + 1024 + 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        _serve(monkeypatch, tmp_path, ":memory:")
        after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert after == (need if hard == resource.RLIM_INFINITY else min(need, hard))
        assert workers.raise_open_files(10) == (after, hard)  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_count_comes_from_the_flag_then_the_environment_then_the_config(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "r.sqlite3")
    config = tmp_path / "gw.toml"
    config.write_text("workers = 2\n")
    assert _serve(monkeypatch, tmp_path, store)["workers"] == 3  # the built-in default: auto
    assert "the default auto: 3 workers (3 CPUs" in capsys.readouterr().err
    config.write_text("workers = 1\n")  # asked for explicitly: one, as before the default changed
    assert _serve(monkeypatch, tmp_path, store, "--config", str(config))["workers"] == 1
    config.write_text("workers = 2\n")
    assert _serve(monkeypatch, tmp_path, store, "--config", str(config))["workers"] == 2
    config.write_text('workers = "auto"\n')
    assert _serve(monkeypatch, tmp_path, store, "--config", str(config))["workers"] == 3
    assert "config workers auto: 3 workers" in capsys.readouterr().err
    for env, argv, expected in [
        ("auto", [], 3), ("AUTO", [], 3), ("2", [], 2),
        ("2", ["--config", str(config)], 2),  # the variable over the file's "auto"
        ("auto", ["--workers", "1"], 1),  # the flag over the variable
        ("4", ["--workers", "auto"], 3),
    ]:
        seen = _serve_with(monkeypatch, tmp_path, store, {"OCMGW_WORKERS": env}, *argv)
        assert seen["workers"] == expected, (env, argv)
    assert "OCMGW_WORKERS auto: 3 workers" in capsys.readouterr().err


def test_the_workers_run_under_the_patient_supervisor(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    seen = _serve_with(monkeypatch, tmp_path, str(tmp_path / "r.sqlite3"), {"OCMGW_WORKERS": "2"})
    assert seen["run"] == "supervisor" and seen["workers"] == 2


def test_a_bad_worker_count_in_the_environment_or_the_file_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "many", "-1", "1.5"):
        _environment(monkeypatch, str(tmp_path / "r.sqlite3"), {"OCMGW_WORKERS": bad})
        assert cli_main.main(["serve"]) == 2, bad
        err = capsys.readouterr().err
        assert "invalid configuration" in err and "workers" in err, (bad, err)
    config = tmp_path / "gw.toml"
    config.write_text('workers = "all"\n')
    _environment(monkeypatch, str(tmp_path / "r.sqlite3"), {})
    assert cli_main.main(["serve", "--config", str(config)]) == 2
    assert "workers" in capsys.readouterr().err


def _environment(monkeypatch: pytest.MonkeyPatch, store: str, extra: dict[str, str]) -> None:
    for name in [n for n in os.environ if n.startswith("OCMGW")]:
        monkeypatch.delenv(name)
    for name, value in {"OCMGW_MODEL": "m", "OCMGW_BACKEND_URL": "http://127.0.0.1:9",
                        "OCMGW__store__path": store, sealing.SERVE_KEY_ENV: "", **extra}.items():
        monkeypatch.setenv(name, value)


def _serve_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: str, extra: dict[str, str],
                *argv: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(workers, "available_cpus", lambda: (3, "3 CPUs"))
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw, run="uvicorn"))
    monkeypatch.setattr(supervisor, "run", lambda *a, **kw: seen.update(kw, run="supervisor"))
    monkeypatch.setattr(limits_service, "start", lambda n, cfg: None)
    _environment(monkeypatch, store, extra)
    assert cli_main.main(["serve", *argv]) == 0
    return seen


def test_workers_without_a_configured_key_share_one_random_sealing_key(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """encrypted_content sealed by one worker must open on the others (an agent's next turn
    reaches any of them): serve draws one random key and hands it to its workers."""
    store = str(tmp_path / "r.sqlite3")
    keys = set()
    for _ in range(2):
        assert _serve(monkeypatch, tmp_path, store, "--workers", "2")["workers"] == 2
        keys.add(os.environ[sealing.SERVE_KEY_ENV])
        assert len(sealing.parse_key(os.environ[sealing.SERVE_KEY_ENV])) == 32
    assert len(keys) == 2  # a fresh key for each serve
    _serve(monkeypatch, tmp_path, store, "--workers", "1")
    assert sealing.SERVE_KEY_ENV not in os.environ  # one process: its own key
    configured = {"OCMGW__responses__encryption_key": sealing.serve_key()}
    assert _serve_with(monkeypatch, tmp_path, store, configured, "--workers", "2")["workers"] == 2
    assert sealing.SERVE_KEY_ENV not in os.environ  # the configured key serves every worker
