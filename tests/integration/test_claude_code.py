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

How Claude Code is found and run (telemetry, error reporting and the auto-updater off,
``HOME`` a temporary directory): :mod:`tests.support.claude_code`.

Only gpt-oss (Harmony) is run here: the scripted models have Harmony's vocabulary and script
Harmony completions (as for the Codex CLI test).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.formats.harmony.vocab import harmony_encoding
from tests.integration.conftest import run_gateway
from tests.support.claude_code import FIRST_REQUEST, assistant_blocks, gateway_toml, run_claude
from tests.support.llama_server import llama_server
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
KEY = "sk-claude-code-test"
CONTEXT = 65536


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
        config.write_text(gateway_toml(tmp / "store.sqlite3", KEY, MODEL, url, CONTEXT,
                                       f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"'))
        with run_gateway(config) as running:
            yield running


def test_claude_p_writes_the_file_with_thinking_and_answers(gateway: Running, tmp_path: Path) -> None:
    work = tmp_path / "work"
    done, served = run_claude(gateway.url, KEY, work, tmp_path / "home", "--output-format", "stream-json",
                              "--verbose")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert (work / FILE).read_text() == CONTENT, done.stdout[-3000:]  # Claude Code's Write ran
    blocks = assistant_blocks(events)
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
    done, served = run_claude(gateway.url, KEY, work, tmp_path / "home", "--output-format", "json")
    result = json.loads(done.stdout)
    assert (work / FILE).read_text() == CONTENT, result
    assert not result["is_error"] and result["result"] == ANSWER and result["num_turns"] == 2, result
    assert served == {"200": 2}, served
