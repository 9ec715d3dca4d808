"""Schemathesis against the served OpenAPI document of the real ``ocm-gateway serve`` (a
fake llama.cpp upstream that answers every generation): coverage, fuzzing and stateful
phases with every check except ``positive_data_acceptance`` (the document is looser than
the validation, on purpose) and ``ignored_auth`` (auth is off here). Any 5xx, a status or
content type the document does not declare, or a body that breaks its schema fails CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import gateway_process
from tests.support.wire import load

pytestmark = pytest.mark.timeout(300)
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]


def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    upstream = LoopbackUpstream(mode="final", events=FINAL)
    exe = Path(sys.executable).with_name("schemathesis")
    with upstream.running() as url, gateway_process(url, "gpt-oss") as gw:
        run = subprocess.run(
            [str(exe), "run", f"{gw}/openapi.json", "--max-examples", "25", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance,ignored_auth", "--no-color",
             "--seed", "20261123", "--report-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=280, cwd=tmp_path)
    summary = run.stdout[run.stdout.find("SUMMARY"):]
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert "passed" in summary and "failed" not in summary.lower().replace("0 failed", ""), summary


def test_schemathesis_on_the_admin_api(tmp_path: Path) -> None:
    """The admin API with its key (keys made, updated, revoked, rotated by the stateful phase;
    usage, models, runs, errors queried with generated parameters): no 5xx, nothing undocumented."""
    import hashlib

    upstream = LoopbackUpstream(mode="final", events=FINAL)
    exe = Path(sys.executable).with_name("schemathesis")
    digest = hashlib.sha256(b"admin-secret").hexdigest()
    with upstream.running() as url, gateway_process(url, "gpt-oss", admin__key_sha256=digest) as gw:
        run = subprocess.run(
            [str(exe), "run", f"{gw}/openapi.json", "--max-examples", "40", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance", "--include-path-regex", "^/admin",
             "-H", "Authorization: Bearer admin-secret", "--no-color", "--seed", "20261126",
             "--report-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=280, cwd=tmp_path)
    summary = run.stdout[run.stdout.find("SUMMARY"):]
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert "Operations:" in run.stdout and "12 selected" in run.stdout, run.stdout[:2000]
    assert "passed" in summary and "failed" not in summary.lower().replace("0 failed", ""), summary
