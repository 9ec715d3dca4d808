"""``ocm-gateway`` subcommands dispatch to their tools (serve is covered by integration tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.main import main
from tests.support.paths import FIXTURES


def test_template_analyze(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["template", "analyze", str(FIXTURES / "templates" / "Qwen3-Coder.jinja")]) == 0
    out = capsys.readouterr().out
    assert "tools.format: TAG_WITH_TAGGED" in out and 'tools.name_prefix: "<function="' in out


def test_transcript_validate_reports_spec_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.ocml"
    bad.write_text("<|start|>assistant<|channel|>final<|message|>unterminated")
    assert main(["transcript", "validate", str(bad)]) != 0
    assert "E-STREAM-TRUNCATED" in capsys.readouterr().out
