"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``) against a gateway, for the
integration tests (``tests/integration/test_claude_code*.py``).

:func:`claude_binary` finds the CLI (``scripts/test.sh`` installs it into ``.cache/claude-code``;
``OCM_CLAUDE_CODE_BIN`` points elsewhere) and fails the test when it is missing.
:func:`gateway_toml` is a gateway config whose one API key may use one model, reached by the
names Claude Code asks for (``[aliases]``).  :func:`run_claude` runs ``claude -p`` with the
documented variables that turn telemetry, error reporting and the auto-updater off, ``HOME`` a
directory of the test's, and returns what it printed and the statuses the gateway answered on
``/v1/messages`` meanwhile (``ocm_requests_total`` before and after).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import FIXTURES, ROOT

SONNET, HAIKU = "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"
FIRST_REQUEST = FIXTURES / "claude_code" / "first_request.json"


def claude_binary() -> Path:
    configured = os.environ.get("OCM_CLAUDE_CODE_BIN")
    installed = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
    found = Path(configured) if configured else installed
    if not found.exists():
        pytest.fail(f"Claude Code is not installed at {found}: run ./scripts/test.sh (it runs npm "
                    "install @anthropic-ai/claude-code) or set OCM_CLAUDE_CODE_BIN.")
    return found


def gateway_toml(store: Path, key: str, model: str, upstream: str, context: int, *model_lines: str) -> str:
    """A llama.cpp ``model`` at ``upstream`` with ``context`` tokens, ``key`` its only key, the
    Sonnet and Haiku names aliases of it; ``model_lines`` end the model's table (its own sections)."""
    return "\n".join([
        "[upstream]", "read_timeout = 300.0", "", "[store]", f'path = "{store}"', "",
        "[[auth.keys]]", 'name = "claude-code"', f'sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"',
        f'models = ["{model}"]', "",
        "[aliases]", f'"{SONNET}" = "{model}"', f'"{HAIKU}" = "{model}"', "",
        f'[models."{model}"]', 'backend = "llamacpp"', f'base_urls = ["{upstream}"]',
        f"context_window = {context}", *model_lines, ""])


def served(url: str, route: str = "/v1/messages") -> dict[str, float]:
    """``ocm_requests_total`` on ``route`` by status."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("ocm_requests_total{") and f'route="{route}"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[status] = out.get(status, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def assistant_blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content blocks of the ``assistant`` events of ``--output-format stream-json``."""
    return [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]]


def run_claude(url: str, key: str, work: Path, home: Path,
               *flags: str) -> tuple[subprocess.CompletedProcess[str], dict[str, float]]:
    """``claude -p "Create the file." --allowedTools Write FLAGS`` in ``work`` (made here) against
    the gateway at ``url``; what it printed (it must exit 0), and the statuses the gateway
    answered on /v1/messages meanwhile."""
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    env |= {"HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": key,
            "ANTHROPIC_MODEL": SONNET, "ANTHROPIC_DEFAULT_HAIKU_MODEL": HAIKU,
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1"}
    before = served(url)
    done = subprocess.run(
        [str(claude_binary()), "-p", "Create the file.", "--allowedTools", "Write", *flags],
        cwd=work, env=env, capture_output=True, text=True, timeout=360, stdin=subprocess.DEVNULL)
    after = served(url)
    delta = {s: n - before.get(s, 0.0) for s, n in after.items() if n - before.get(s, 0.0)}
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done, delta
