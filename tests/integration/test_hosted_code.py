"""``code_interpreter`` through the real stack: the OpenAI SDK and the Agents SDK →
``ocm-gateway serve`` → a real llama.cpp server, with the real sandbox service (``ocm-gateway
sandbox``, bubblewrap).  The scripted gpt-oss model calls its built-in ``python`` tool with
``print(6*7)`` and, once the call is in its prompt, answers (the unit tests, whose fake model
reads its prompt, show the answer depends on the ``42`` the sandbox printed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.openresponses import validate_response
from tests.support.process import Running
from tests.support.sandbox import TOKEN, sandbox_service
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODEL = "gpt-oss-code"
ANSWER = "It is 42."
SCRIPT = ("<|channel|>analysis to=python<|message|>print(6*7)#axolotl<|call|>"
          f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")
TOOLS: Any = [{"type": "code_interpreter", "container": {"type": "auto"}}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("code-gateway")
    with sandbox_service() as sandbox, llama_server(scripted_model("code", SCRIPT)) as url:
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[upstream]", "read_timeout = 60.0", "", "[store]", f'path = "{tmp / "store.sqlite3"}"', "",
            "[tools.code_interpreter]", f'url = "{sandbox.url}"', f'token = "{TOKEN}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]', "context_window = 4096",
            f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"', ""]))
        with run_gateway(config) as running:
            yield running


def test_print_6_times_7(gateway: Running) -> None:
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0, timeout=90)
    r = client.responses.create(model=MODEL, input="What is 6*7?", tools=TOOLS)
    validate_response(r.model_dump(mode="json", exclude_unset=True))
    assert [i.type for i in r.output] == ["code_interpreter_call", "message"] and r.output_text == ANSWER
    call = r.output[0]
    assert call.type == "code_interpreter_call" and call.status == "completed"
    assert call.outputs is not None and call.outputs[0].type == "logs" and call.outputs[0].logs == "42\n"
    with client.responses.stream(model=MODEL, input="What is 6*7?", tools=TOOLS) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert final.output_text == ANSWER
    assert kinds.index("response.code_interpreter_call.completed") < kinds.index("response.output_text.delta")


async def test_agents_sdk_code_interpreter_tool(gateway: Running) -> None:
    from agents import Agent, CodeInterpreterTool, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0, timeout=90)
    agent = Agent(name="assistant", model=OpenAIResponsesModel(MODEL, client),
                  tools=[CodeInterpreterTool(tool_config={"type": "code_interpreter",
                                                          "container": {"type": "auto"}})])
    result = await Runner.run(agent, "What is 6*7?", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == ANSWER
    calls = [i.raw_item for i in result.new_items
             if getattr(i.raw_item, "type", None) == "code_interpreter_call"]
    assert len(calls) == 1 and calls[0].outputs[0].logs == "42\n"  # type: ignore[union-attr]
