"""``./scripts/test.sh`` checks its prerequisites first (scripts/prereqs.sh): with a PATH that
lacks a tool it names the tool and the Debian package to install and stops with exit 1 before
installing anything into .venv, never silently; where it may (root, or sudo when asked) it
installs the packages with apt-get and checks again. Every run here uses a PATH of fake tools
and a fake apt-get that records what it was asked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TOOLS = {"node": "nodejs", "npm": "npm", "bwrap": "bubblewrap", "redis-server": "redis-server",
         "chromium": "chromium", "chromedriver": "chromium-driver", "docker-compose": "docker-compose"}
BASH = shutil.which("bash") or "/bin/bash"


def _executable(path: Path, body: str = "exit 0") -> None:
    path.write_text(f"#!{BASH}\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """A PATH directory holding every prerequisite (as a fake) and the few utilities the scripts
    use, plus a PostgreSQL root with a fake initdb."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in TOOLS:
        _executable(bin_ / tool)
    for utility in ("bash", "dirname", "chmod", "id"):
        found = shutil.which(utility)
        assert found, utility
        (bin_ / utility).symlink_to(found)
    (tmp_path / "postgresql" / "15" / "bin").mkdir(parents=True)
    _executable(tmp_path / "postgresql" / "15" / "bin" / "initdb")
    return bin_


def _check(bin_: Path, policy: str, script: str = ". scripts/prereqs.sh; check_prerequisites"
           ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_), "POSTGRES_ROOT": str(bin_.parent / "postgresql"),
           "OCM_INSTALL_PREREQS": policy, "HOME": str(bin_.parent)}
    return subprocess.run([BASH, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=30)


def test_nothing_missing_says_nothing(machine: Path) -> None:
    done = _check(machine, "0")
    assert done.returncode == 0 and done.stderr == "" and done.stdout == ""


@pytest.mark.parametrize("tool", [*TOOLS, "initdb"])
def test_a_missing_tool_is_named_with_its_debian_package(machine: Path, tool: str) -> None:
    if tool == "initdb":
        shutil.rmtree(machine.parent / "postgresql")
    else:
        (machine / tool).unlink()
    package = TOOLS.get(tool, "postgresql")
    done = _check(machine, "0")
    assert done.returncode == 1
    assert f"  {tool} (Debian package {package}): " in done.stderr
    assert f"sudo apt-get install -y --no-install-recommends {package}\n" in done.stderr
    assert sum(line.startswith("  ") and "(Debian package" in line for line in done.stderr.splitlines()) == 1


def test_initdb_on_the_path_is_enough(machine: Path) -> None:
    shutil.rmtree(machine.parent / "postgresql")
    _executable(machine / "initdb")
    assert _check(machine, "0").returncode == 0


def test_where_it_may_it_installs_with_apt_get_and_checks_again(machine: Path) -> None:
    for tool in ("npm", "redis-server"):
        (machine / tool).unlink()
    log = machine.parent / "apt.log"
    # apt-get "installs" by creating the tools; sudo (used when the tests do not run as root) runs it
    _executable(machine / "apt-get", f'echo "$*" >> {log}\n'
                f'if [ "$1" = install ]; then for t in npm redis-server; do '
                f'printf "#!{BASH}\\n" > {machine}/$t; chmod +x {machine}/$t; done; fi')
    _executable(machine / "sudo", 'exec "$@"')
    done = _check(machine, "1")
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["update -qq",
                                            "install -y -qq --no-install-recommends npm redis-server"]
    assert "installing with apt-get: npm redis-server" in done.stderr


def test_an_install_that_brings_nothing_still_fails_and_says_what_is_missing(machine: Path) -> None:
    (machine / "chromedriver").unlink()
    _executable(machine / "apt-get")
    _executable(machine / "sudo", 'exec "$@"')
    done = _check(machine, "1")
    assert done.returncode == 1
    assert "still missing after apt-get: chromium-driver" in done.stderr
    assert "sudo apt-get install -y --no-install-recommends chromium-driver" in done.stderr


def test_policy_0_never_runs_apt_get(machine: Path) -> None:
    (machine / "bwrap").unlink()
    _executable(machine / "apt-get", f"touch {machine.parent}/ran")
    assert _check(machine, "0").returncode == 1
    assert not (machine.parent / "ran").exists()


def test_test_sh_stops_first_and_says_why(machine: Path) -> None:
    """The real script: a missing tool stops it before the venv or pip is touched (the fake PATH
    has no python3: reaching the install steps would fail differently)."""
    (machine / "npm").unlink()
    done = _check(machine, "0", script="./scripts/test.sh")
    assert done.returncode == 1
    assert "npm (Debian package npm)" in done.stderr
    assert "sudo apt-get install -y --no-install-recommends npm" in done.stderr
    assert "stopped:" not in done.stderr  # an orderly stop, not a failed command


def test_test_sh_names_a_failing_command_instead_of_stopping_silently(machine: Path) -> None:
    """Past the check, a failure under ``set -e`` is named: a copy of the scripts in a tree
    without .venv, with a Python that does not exist."""
    tree = machine.parent / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("test.sh", "prereqs.sh"):
        shutil.copy2(ROOT / "scripts" / name, tree / "scripts" / name)
    done = _check(machine, "0", script=f"PYTHON=/nonexistent/python3 {tree}/scripts/test.sh")
    assert done.returncode != 0
    assert 'test.sh: stopped: `"$PY" -m venv .venv` failed (exit 127' in done.stderr, done.stderr
    assert not (tree / ".venv").exists()


def test_ci_run_still_installs_what_test_sh_checks() -> None:
    """.ci/run installs the Debian packages before test.sh runs: every package test.sh asks for is
    one .ci/run installs, or is on the CI image (node, npm)."""
    ci = (ROOT / ".ci" / "run").read_text()
    for package in ("docker-compose", "bubblewrap", "postgresql", "redis-server", "chromium",
                    "chromium-driver"):
        assert f"missing+=({package})" in ci, package
    assert os.access(ROOT / "scripts" / "test.sh", os.X_OK)
