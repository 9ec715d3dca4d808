"""The real Codex CLI (npm ``@openai/codex``, its Linux binary) against ``ocm-gateway serve`` on a
real llama.cpp server, over HTTP (SSE) and over WebSocket mode.

The model is a scripted gpt-oss model (:mod:`tests.support.scripted_gguf`) with two turns: it
calls Codex's ``exec_command`` to create a file; once that call (and its output) is in the
prompt, a marker token from the call flips it to the final answer.  ``codex exec`` must run
the command (the file exists afterwards) and print the answer.  Codex sends its whole first
request (namespace tools, ``web_search``, ``client_metadata``, ``store: false``,
``include: ["reasoning.encrypted_content"]``, ...) and, on the second turn, the call and its
output back as input items.

The CLI is installed by ``scripts/test.sh`` (``npm install @openai/codex`` into
``.cache/codex``; no internet needed beyond the npm registry); ``OCM_CODEX_BIN`` points
elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.paths import ROOT
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FILE = "quixotic_axolotl.txt"  # its rarest token ("otl") is the marker: never in the first prompt
ANSWER = "Created the file you asked for."
SCRIPT = ('<|channel|>commentary to=functions.exec_command <|constrain|>json'
          f'<|message|>{{"cmd":"touch {FILE}"}}<|call|>'
          f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")
MODEL = "gpt-oss-scripted"


def codex_binary() -> Path:
    configured = os.environ.get("OCM_CODEX_BIN")
    found = Path(configured) if configured else ROOT / ".cache" / "codex" / "node_modules" / ".bin" / "codex"
    if not found.exists():
        pytest.fail(f"The Codex CLI is not installed at {found}: run ./scripts/test.sh (it runs "
                    "npm install @openai/codex) or set OCM_CODEX_BIN.")
    return found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("codex-gateway")
    # Codex's first prompt is ~7,300 tokens; the scripted model's context is 8,192.
    with llama_server(scripted_model("codex", SCRIPT), n_ctx=8192) as url:
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[upstream]", "read_timeout = 120.0", "", "[store]", f'path = "{tmp / "store.sqlite3"}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]',
            "context_window = 8192", f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"', ""]))
        with run_gateway(config) as running:
            yield running


def _served(url: str, status: str) -> float:
    """``ocm_requests_total`` on ``/v1/responses`` with this status (101: WebSocket sessions)."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("ocm_requests_total{") and 'route="/v1/responses"' in line \
                and f'status="{status}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
def test_codex_exec_runs_the_tool_and_shows_the_answer(gateway: Running, tmp_path: Path,
                                                      websocket: bool) -> None:
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text("\n".join([
        f'model = "{MODEL}"', 'model_provider = "ocm"', "",
        "[model_providers.ocm]", 'name = "ocm-gateway"', f'base_url = "{gateway.url}/v1"',
        'wire_api = "responses"', f"supports_websockets = {'true' if websocket else 'false'}",
        "request_max_retries = 0", "stream_max_retries = 0", ""]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEX"))}
    env |= {"CODEX_HOME": str(home), "NO_COLOR": "1", "RUST_LOG": "error"}
    before = {status: _served(gateway.url, status) for status in ("200", "101")}
    done = subprocess.run(
        [str(codex_binary()), "exec", "--json", "--skip-git-repo-check",
         "--dangerously-bypass-approvals-and-sandbox", "-C", str(work), "Create the file."],
        env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert (work / FILE).exists(), done.stdout[-3000:]  # the model's call ran in Codex's shell
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands and f"touch {FILE}" in commands[0]["command"], items
    messages = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert messages == [ANSWER], items
    assert not [e for e in events if e.get("type") in ("error", "turn.failed")], events
    # Two turns (the call, then the answer), over the transport the provider asked for.
    served = {status: _served(gateway.url, status) - before[status] for status in ("200", "101")}
    if websocket:  # Codex may open a second socket (it prewarms one); nothing over HTTP
        assert served["200"] == 0 and served["101"] >= 1, served
    else:
        assert served == {"200": 2, "101": 0}, served
