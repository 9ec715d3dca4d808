"""The generated scripted models on the real llama.cpp server do what the tests rely on."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai_harmony import Conversation, Message, Role, SystemContent

from app.formats.harmony.vocab import harmony_encoding
from tests.support.fixtures import SCRIPT_FINAL, SCRIPT_REASONING, SCRIPT_TOOL
from tests.support.scripted_gguf import ScriptConflict, plan_script, script_token_ids

pytestmark = pytest.mark.integration


def _prompt(user: str) -> list[int]:
    conv = Conversation.from_messages([Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
                                       Message.from_role_and_content(Role.USER, user)])
    return list(harmony_encoding().render_conversation_for_completion(conv, Role.ASSISTANT))


@pytest.mark.parametrize(("fixture", "script"), [
    ("llama_final", SCRIPT_FINAL), ("llama_reasoning", SCRIPT_REASONING), ("llama_tool", SCRIPT_TOOL)])
@pytest.mark.parametrize("user", ["hi", "word " * 1500])
def test_model_emits_its_script(request: pytest.FixtureRequest, fixture: str, script: str,
                                user: str) -> None:
    url = request.getfixturevalue(fixture)
    body = {"prompt": _prompt(user), "n_predict": 64, "stream": False, "return_tokens": True,
            "temperature": 1.0}
    r = httpx.post(f"{url}/completion", json=body, timeout=60).json()
    assert r["tokens"] == script_token_ids(script)  # incl. the final <|return|> / <|call|>
    assert r["stop_type"] == "eos"


@pytest.mark.parametrize(("fixture", "script"), [
    ("llama_final", SCRIPT_FINAL), ("llama_reasoning", SCRIPT_REASONING), ("llama_tool", SCRIPT_TOOL)])
def test_streamed_tokens_and_eog(request: pytest.FixtureRequest, fixture: str, script: str) -> None:
    url = request.getfixturevalue(fixture)
    body = {"prompt": _prompt("hi"), "n_predict": 64, "return_tokens": True, "stream": True,
            "temperature": 1.0}
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{url}/completion", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    *per_token, last = events
    # One event per token (the EOG token included, with content ""), then a closing event.
    assert all(len(e["tokens"]) == 1 and e["stop"] is False for e in per_token)
    assert per_token[-1]["content"] == ""
    assert last["stop"] is True and last["tokens"] == [] and last["stop_type"] == "eos"
    tokens = [t for e in per_token for t in e["tokens"]]
    assert tokens == script_token_ids(script)
    if fixture == "llama_reasoning":  # <|end|> (200007) mid-script did not stop generation
        assert 200007 in tokens


def test_every_scripted_token_wins_by_tens_of_nats(llama_reasoning: str) -> None:
    body = {"prompt": _prompt("hi"), "n_predict": 64, "return_tokens": True, "n_probs": 2}
    r = httpx.post(f"{llama_reasoning}/completion", json=body, timeout=60).json()
    assert r["tokens"] == script_token_ids(SCRIPT_REASONING)
    for step in r["completion_probabilities"]:  # includes the attention-switched successors
        best, runner_up = step["top_logprobs"]
        assert best["id"] == step["id"] and runner_up["logprob"] < -60


@pytest.mark.parametrize("text", [
    "Hello world", "naïve café 12345 ☀️", "don't  stop\n\ttabs", "数字とテキスト"])
def test_server_tokenizer_matches_harmony(llama_final: str, text: str) -> None:
    r = httpx.post(f"{llama_final}/tokenize", json={"content": text}, timeout=30).json()
    assert r["tokens"] == harmony_encoding().encode(text, allowed_special=set())


def test_unexpressible_scripts_are_refused() -> None:
    with pytest.raises(ScriptConflict):
        plan_script(script_token_ids("<|channel|>final<|message|>x a b a c a d<|return|>"))
    with pytest.raises(ScriptConflict):
        plan_script(script_token_ids("<|channel|>final<|message|>no stop token"))
