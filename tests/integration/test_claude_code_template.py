"""The real Claude Code CLI against ``ocm-gateway serve`` on a real llama.cpp server, over HTTP,
with a **chat-template** model (the Harmony twin is ``tests/integration/test_claude_code.py``).

The model is scripted (:mod:`tests.support.scripted_gguf`) and served with
``tests/fixtures/scripted/think-tools-template.jinja``: Qwen3 / QwQ-style ``<think>...</think>``
reasoning and a Hermes ``<tool_call>`` as plain text, which the gateway's auto-parser turns into
a ``thinking`` block and a ``tool_use`` block.  It thinks, calls Claude Code's ``Write`` tool (name
and input schema as in ``tests/fixtures/claude_code/first_request.json``) and, on the next turn,
answers.  The answer's switch (``assistant`` → the answer) is keyed on `` zebra``, a token of the
*thought*: the second prompt holds it only if the gateway re-rendered the reasoning sealed in the
signature Claude Code sent back (the template renders an assistant turn's reasoning; the gateway
reads a thinking block's signature, never its text, and with ``display: "omitted"`` the text
sent back is empty), so the answer itself shows the thinking round trip.  The other switches key
on ``otl`` (the file name), which the second prompt repeats in the call.

Between Claude Code and the gateway sits a transparent recording proxy
(:mod:`tests.support.recording_proxy`): the test asserts on the requests the gateway received —
the second one carries the ``thinking`` block with the very signature the gateway returned, its
``tool_use`` and the ``tool_result``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.formats.harmony.vocab import harmony_encoding
from tests.integration.conftest import run_gateway
from tests.support.claude_code import FIRST_REQUEST, assistant_blocks, gateway_toml, run_claude
from tests.support.llama_server import llama_server
from tests.support.paths import FIXTURES
from tests.support.recording_proxy import Recording, recording_proxy
from tests.support.scripted_gguf import plan_script, script_token_ids, scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

FILE = "quixotic_axolotl.txt"  # "otl" (rare) flips the call's tokens once the call is in the prompt
CONTENT = "hello"
THOUGHT = "The zebra file it is."  # " zebra" flips "assistant" to the answer: only the thought has it
ANSWER = "Created the file."
# Spacing chosen so no JSON token has three successors (scripted_gguf's limit).
CALL = f'{{"name":"Write","arguments":{{"file_path": "{FILE}","content": "{CONTENT}"}}}}'
SCRIPT = (f"<think>{THOUGHT}</think>\n\n<tool_call>\n{CALL}\n</tool_call><|call|>"
          f"<|start|>assistant{ANSWER}<|return|>")
MODEL = "qwen-scripted"
KEY = "sk-claude-code-template-test"
CONTEXT = 65536
TEMPLATE = FIXTURES / "scripted" / "think-tools-template.jinja"


def test_the_script_markers_are_not_in_claude_codes_first_prompt() -> None:
    """A marker in the first prompt (Claude Code's request, or the template's own text) would
    flip the model early: none is a token of either."""
    body = json.loads(FIRST_REQUEST.read_text())["body"]
    text = json.dumps(body, ensure_ascii=False) + TEMPLATE.read_text()
    prompt_ids = set(harmony_encoding().encode(text, disallowed_special=()))
    switches = plan_script(script_token_ids(SCRIPT)).switches
    markers = {s.marker for s in switches}
    assert markers and not markers & prompt_ids, [harmony_encoding().decode([m]) for m in markers]
    # The answer's switch keys on the thought alone.
    (answer,) = [s for s in switches if s.second == script_token_ids(ANSWER)[0]]
    assert harmony_encoding().decode([answer.marker]) in THOUGHT
    assert harmony_encoding().decode([answer.marker]) not in CALL


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recording]:
    tmp = tmp_path_factory.mktemp("claude-code-template")
    with llama_server(scripted_model("claude-code-template", SCRIPT, context_length=CONTEXT),
                      n_ctx=CONTEXT) as url:
        config = tmp / "gateway.toml"
        config.write_text(gateway_toml(tmp / "store.sqlite3", KEY, MODEL, url, CONTEXT,
                                       'prompt_format = "template"', f'[models."{MODEL}".template]',
                                       f'path = "{TEMPLATE}"'))
        with run_gateway(config) as running, recording_proxy(running.url) as recording:
            yield recording


def _messages_requests(recording: Recording) -> list[Any]:
    return [r for r in recording.requests() if r.method == "POST" and r.path.split("?")[0] == "/v1/messages"]


def _claude(gateway: Recording, work: Path, home: Path,
            *flags: str) -> tuple[str, dict[str, float], list[Any]]:
    """``claude -p`` through the recording proxy (:func:`tests.support.claude_code.run_claude`):
    what it printed, the statuses the gateway answered on /v1/messages meanwhile, and the
    requests it received."""
    seen = len(_messages_requests(gateway))
    done, served = run_claude(gateway.url, KEY, work, home, *flags)
    return done.stdout, served, _messages_requests(gateway)[seen:]


def _sent_back(requests: list[Any]) -> tuple[list[Any], list[Any]]:
    """The second request's assistant turn (its blocks) and its last user turn's blocks."""
    assert len(requests) == 2, [r.path for r in requests]
    messages = requests[1].json()["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert len(assistant) == 1, messages
    return assistant[0]["content"], messages[-1]["content"]


def test_claude_p_writes_the_file_with_thinking_on_a_template_model(gateway: Recording,
                                                                    tmp_path: Path) -> None:
    work = tmp_path / "work"
    out, served, requests = _claude(gateway, work, tmp_path / "home", "--output-format", "stream-json",
                                    "--verbose")
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert (work / FILE).read_text() == CONTENT, out[-3000:]  # Claude Code's Write ran
    blocks = assistant_blocks(events)
    thinking = [b for b in blocks if b["type"] == "thinking"]
    assert [b["thinking"] for b in thinking] == [THOUGHT], blocks
    assert thinking[0]["signature"].startswith("ocm"), thinking  # the gateway's sealed copy
    calls = [b for b in blocks if b["type"] == "tool_use"]
    assert [(c["name"], c["input"]) for c in calls] == [("Write", {"file_path": FILE, "content": CONTENT})]
    assert [b["text"] for b in blocks if b["type"] == "text"] == [ANSWER], blocks
    final = events[-1]
    assert final["type"] == "result" and not final["is_error"] and final["result"] == ANSWER, final
    assert final["num_turns"] == 2, final
    assert served == {"200": 2}, served
    # What the gateway received: the first request offered Write and asked for thinking; the
    # second sent back the thinking block with the gateway's own signature, the call, its result.
    first = requests[0].json()
    assert first["thinking"]["type"] == "enabled" and "Write" in [t["name"] for t in first["tools"]]
    turn, user = _sent_back(requests)
    back = [b for b in turn if b["type"] == "thinking"]
    assert [b["signature"] for b in back] == [thinking[0]["signature"]], turn
    assert [b["type"] for b in turn] == ["thinking", "tool_use"], turn
    sent_calls = [(b["id"], b["input"]) for b in turn if b["type"] == "tool_use"]
    assert sent_calls == [(calls[0]["id"], calls[0]["input"])], turn
    results = [b for b in user if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [calls[0]["id"]] and not results[0].get("is_error"), user


def test_claude_p_with_omitted_thinking_on_a_template_model(gateway: Recording, tmp_path: Path) -> None:
    """Without ``--verbose`` Claude Code asks for ``thinking.display: "omitted"``: the thinking
    block comes back empty but signed, and the signature alone carries the reasoning to the
    second prompt (the answer depends on it)."""
    work = tmp_path / "work"
    out, served, requests = _claude(gateway, work, tmp_path / "home", "--output-format", "json")
    result = json.loads(out)
    assert (work / FILE).read_text() == CONTENT, result
    assert not result["is_error"] and result["result"] == ANSWER and result["num_turns"] == 2, result
    assert served == {"200": 2}, served
    assert requests[0].json()["thinking"].get("display") == "omitted"
    turn, _ = _sent_back(requests)
    back = [b for b in turn if b["type"] == "thinking"]
    assert len(back) == 1 and back[0]["thinking"] == "" and back[0]["signature"].startswith("ocm"), turn
