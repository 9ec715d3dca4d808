"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``, its Linux binary) against
``ocm-gateway serve`` on a real llama.cpp server, over HTTP.

``claude -p`` (non-interactive) asks for ``claude-sonnet-4-5-20250929``, which the gateway's
``[aliases]`` maps to a scripted gpt-oss model (:mod:`tests.support.scripted_gguf`); the API
key's allow-list names the model itself.  The model thinks (Harmony's analysis channel: a
``thinking`` block whose signature is the gateway's sealed copy), calls Claude Code's file tool
``Write`` (name and input schema as in Claude Code's first request,
``tests/fixtures/claude_code/first_request.json``) and, once that call is in its prompt (a marker
token of the call flips it), answers.  Claude Code writes the file, sends the thinking block and
the tool result back (the second request must be accepted: a forged or lost signature is a 400)
and prints the answer.  Claude Code's first prompt is ~18,000 tokens and it asks for
``max_tokens: 32000``, so the model's context is 65,536.

Telemetry, error reporting and the auto-updater are off (Claude Code's documented variables);
``HOME`` is a temporary directory.  The CLI is installed by ``scripts/test.sh`` (``npm install
@anthropic-ai/claude-code`` into ``.cache/claude-code``); ``OCM_CLAUDE_CODE_BIN`` points
elsewhere.

Only gpt-oss (Harmony) is run here: the scripted models have Harmony's vocabulary and script
Harmony completions (as for the Codex CLI test).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.formats.harmony.vocab import harmony_encoding
from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.paths import ROOT
from tests.support.process import Running
from tests.support.scripted_gguf import plan_script, script_token_ids, scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

FILE = "quixotic_axolotl.txt"  # "otl" (rare) flips the model to its answer once the call is in the prompt
CONTENT = "hello"
THOUGHT = "The zebra file it is."  # " zebra" flips the analysis to the call
ANSWER = "Created the file."
# The answer is a commentary message: a scripted model cannot follow <|channel|> with three
# different channels (analysis, commentary, final); the gateway serves it as text all the same.
# The thought and the call's JSON both start with "\n" for the same reason (<|message|>).
SCRIPT = (f"<|channel|>analysis<|message|>\n{THOUGHT}<|end|>"
          "<|start|>assistant<|channel|>commentary to=functions.Write <|constrain|>json<|message|>\n"
          f'{{"file_path":"{FILE}","content":"{CONTENT}"}}<|call|>'
          f"<|start|>assistant<|channel|>commentary<|message|>{ANSWER}<|return|>")
MODEL = "gpt-oss-scripted"
SONNET, HAIKU = "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"
KEY = "sk-claude-code-test"
CONTEXT = 65536
FIRST_REQUEST = ROOT / "tests" / "fixtures" / "claude_code" / "first_request.json"


def claude_binary() -> Path:
    configured = os.environ.get("OCM_CLAUDE_CODE_BIN")
    installed = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
    found = Path(configured) if configured else installed
    if not found.exists():
        pytest.fail(f"Claude Code is not installed at {found}: run ./scripts/test.sh (it runs npm "
                    "install @anthropic-ai/claude-code) or set OCM_CLAUDE_CODE_BIN.")
    return found


def test_the_script_markers_are_not_in_claude_codes_first_prompt() -> None:
    """A marker already in the first prompt would flip the model early (it would answer
    without calling the tool): none of them is a token of Claude Code's recorded request."""
    body = json.loads(FIRST_REQUEST.read_text())["body"]
    text = json.dumps(body, ensure_ascii=False)
    prompt_ids = set(harmony_encoding().encode(text, disallowed_special=()))
    markers = {s.marker for s in plan_script(script_token_ids(SCRIPT)).switches}
    assert markers and not markers & prompt_ids, [harmony_encoding().decode([m]) for m in markers]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("claude-code-gateway")
    with llama_server(scripted_model("claude-code", SCRIPT, context_length=CONTEXT), n_ctx=CONTEXT) as url:
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[upstream]", "read_timeout = 300.0", "", "[store]", f'path = "{tmp / "store.sqlite3"}"', "",
            "[[auth.keys]]", 'name = "claude-code"', f'sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"',
            f'models = ["{MODEL}"]', "",
            "[aliases]", f'"{SONNET}" = "{MODEL}"', f'"{HAIKU}" = "{MODEL}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]',
            f"context_window = {CONTEXT}", f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"', ""]))
        with run_gateway(config) as running:
            yield running


def _served(url: str) -> dict[str, float]:
    """``ocm_requests_total`` on ``/v1/messages`` by status."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("ocm_requests_total{") and 'route="/v1/messages"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[status] = out.get(status, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]]


def _claude(gateway: Running, work: Path, home: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str],
                                                                         dict[str, float]]:
    """``claude -p "Create the file." --allowedTools Write FLAGS`` in ``work``; what it printed,
    and the statuses the gateway answered on /v1/messages meanwhile."""
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    env |= {"HOME": str(home), "ANTHROPIC_BASE_URL": gateway.url, "ANTHROPIC_AUTH_TOKEN": KEY,
            "ANTHROPIC_MODEL": SONNET, "ANTHROPIC_DEFAULT_HAIKU_MODEL": HAIKU,
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1"}
    before = _served(gateway.url)
    done = subprocess.run(
        [str(claude_binary()), "-p", "Create the file.", "--allowedTools", "Write", *flags],
        cwd=work, env=env, capture_output=True, text=True, timeout=360, stdin=subprocess.DEVNULL)
    after = _served(gateway.url)
    served = {s: n - before.get(s, 0.0) for s, n in after.items() if n - before.get(s, 0.0)}
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done, served


def test_claude_p_writes_the_file_with_thinking_and_answers(gateway: Running, tmp_path: Path) -> None:
    work = tmp_path / "work"
    done, served = _claude(gateway, work, tmp_path / "home", "--output-format", "stream-json", "--verbose")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert (work / FILE).read_text() == CONTENT, done.stdout[-3000:]  # Claude Code's Write ran
    blocks = _blocks(events)
    thinking = [b for b in blocks if b["type"] == "thinking"]
    assert [b["thinking"].strip() for b in thinking] == [THOUGHT], blocks
    assert thinking[0]["signature"].startswith("ocm"), thinking  # the gateway's sealed copy
    calls = [b for b in blocks if b["type"] == "tool_use"]
    assert [(c["name"], c["input"]) for c in calls] == [("Write", {"file_path": FILE, "content": CONTENT})]
    results = [b for e in events if e.get("type") == "user" for b in e["message"]["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [calls[0]["id"]] and not results[0].get("is_error"), results
    assert [b["text"] for b in blocks if b["type"] == "text"] == [ANSWER], blocks
    final = events[-1]
    assert final["type"] == "result" and not final["is_error"] and final["result"] == ANSWER, final
    assert final["num_turns"] == 2, final
    # Both requests (the call; the thinking and tool result sent back, then the answer) were
    # the gateway's, answered 200 on /v1/messages, and nothing else failed there.
    assert served == {"200": 2}, served


def test_claude_p_with_omitted_thinking(gateway: Running, tmp_path: Path) -> None:
    """Without ``--verbose`` Claude Code asks for ``thinking.display: "omitted"``: the thinking
    block comes with its signature only (as recorded from this version), and sent back, it is
    accepted (the signature holds the reasoning)."""
    work = tmp_path / "work"
    done, served = _claude(gateway, work, tmp_path / "home", "--output-format", "json")
    result = json.loads(done.stdout)
    assert (work / FILE).read_text() == CONTENT, result
    assert not result["is_error"] and result["result"] == ANSWER and result["num_turns"] == 2, result
    assert served == {"200": 2}, served
