"""``web_search`` through the real stack: the OpenAI SDK (and ``ocm-gateway conformance``) →
``ocm-gateway serve`` with ``[tools.web_search]`` on ``tests/fixtures/web_corpus`` → a real
llama.cpp server.

The scripted gpt-oss model (:mod:`tests.support.scripted_gguf`) calls ``browser.search`` and,
once the call is in its prompt (the marker is the rarest token of its query, "axolotl"),
answers citing the page the search found.  Forced (``tool_choice: {"type": "web_search"}``)
the prompt ends with ``<|channel|>commentary to=`` and the script's own ``=`` → ``browser``
continues it, so the same model serves the Open Responses suite's ``offline-web-search`` case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.openresponses import validate_response
from tests.support.paths import ROOT
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODEL = "gpt-oss-search"
SITE = "https://www.openresponses.org/"
ANSWER = f"An open specification 【0†L1】. Details: {SITE}"  # gpt-oss's citation, then a URL
SCRIPT = ('<|channel|>commentary to=browser.search <|constrain|>json'
          '<|message|>{"query":"OpenResponses agentic loop axolotl"}<|call|>'
          f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("search-gateway")
    with llama_server(scripted_model("web-search", SCRIPT)) as url:
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[upstream]", "read_timeout = 60.0", "", "[store]", f'path = "{tmp / "store.sqlite3"}"', "",
            "[tools.web_search]", f'documents = "{ROOT / "tests" / "fixtures" / "web_corpus"}"',
            f'index = "{tmp / "web.sqlite3"}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]', "context_window = 4096",
            f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"', ""]))
        with run_gateway(config) as running:
            yield running


def _client(gw: Running) -> OpenAI:
    return OpenAI(base_url=f"{gw.url}/v1", api_key="not-needed", max_retries=0, timeout=90)


def test_search_and_a_cited_answer(gateway: Running) -> None:
    r = _client(gateway).responses.create(model=MODEL, input="What is Open Responses?",
                                          tools=[{"type": "web_search"}],
                                          include=["web_search_call.action.sources"])
    validate_response(r.model_dump(mode="json", exclude_unset=True))
    assert [i.type for i in r.output] == ["web_search_call", "message"] and r.status == "completed"
    call = r.output[0]
    assert call.type == "web_search_call" and call.action.type == "search"
    assert call.action.query == "OpenResponses agentic loop axolotl"
    assert call.action.sources and call.action.sources[0].url == SITE
    text = r.output[1].content[0]  # type: ignore[union-attr]
    assert text.type == "output_text" and text.text == ANSWER
    notes = text.annotations  # type: ignore[union-attr]
    assert [(a.type, a.url, text.text[a.start_index:a.end_index]) for a in notes] == [  # type: ignore[union-attr]
        ("url_citation", SITE, "【0†L1】"), ("url_citation", SITE, SITE)]


def test_streamed(gateway: Running) -> None:
    tools: Any = [{"type": "web_search_preview", "search_context_size": "low"}]
    with _client(gateway).responses.stream(model=MODEL, input="What is Open Responses?", tools=tools) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert final.output_text == ANSWER
    assert kinds.index("response.web_search_call.completed") < kinds.index("response.output_text.delta")
    assert "response.output_text.annotation.added" in kinds and kinds[-1] == "response.completed"


def test_the_suites_offline_web_search_case(gateway: Running) -> None:
    exe = Path(sys.executable).with_name("ocm-gateway")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli.main"]
    proc = subprocess.run([*cmd, "conformance", "--base-url", gateway.url, "--model", MODEL, "--json",
                           "--only", "offline-web-search", "--enable-offline-web-search"],
                          capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    [result] = report["results"]
    assert (result["status"], result["schema"]) == ("passed", "pass"), result["reasons"]
    assert proc.returncode == 0


async def test_agents_sdk_web_search_tool(gateway: Running) -> None:
    """The OpenAI Agents SDK's ``WebSearchTool`` (tracing off: it would export to api.openai.com)."""
    from agents import Agent, RunConfig, Runner, WebSearchTool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="not-needed", max_retries=0, timeout=90)
    agent = Agent(name="assistant", model=OpenAIResponsesModel(MODEL, client),
                  tools=[WebSearchTool(search_context_size="high", external_web_access=False)])
    result = await Runner.run(agent, "What is Open Responses?", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == ANSWER
    calls = [i.raw_item for i in result.new_items if getattr(i.raw_item, "type", None) == "web_search_call"]
    assert len(calls) == 1 and calls[0].action.type == "search"  # type: ignore[union-attr]
