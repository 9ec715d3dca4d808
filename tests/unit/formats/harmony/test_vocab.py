"""The o200k vocabulary loads offline on a fresh machine with no environment set up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.formats.harmony.vocab import O200K_SHA256, _sha256, ensure_vocab_file
from tests.support.paths import ROOT


def test_fresh_home_no_env_loads_harmony(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TIKTOKEN_ENCODINGS_BASE", "OCM_GATEWAY_CACHE", "XDG_CACHE_HOME")}
    env["HOME"] = str(tmp_path)
    # No network either: any attempt to download would need a proxy we point nowhere.
    env.update({"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"})
    code = ("from app.formats.harmony.vocab import harmony_encoding as h; "
            "print(h().encode('<|start|>hi', allowed_special='all'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[200006, 3686]"
    cached = tmp_path / ".cache" / "ocm-gateway" / "tiktoken" / "o200k_base.tiktoken"
    assert _sha256(cached) == O200K_SHA256


def test_corrupt_cache_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setenv("OCM_GATEWAY_CACHE", str(tmp_path))
    target = tmp_path / "tiktoken" / "o200k_base.tiktoken"
    target.parent.mkdir(parents=True)
    target.write_text("garbage")
    assert ensure_vocab_file() == target
    assert _sha256(target) == O200K_SHA256
