"""Structured output through real clients on chat-template models, reasoning and not, on a
real llama.cpp server: the OpenAI SDK's ``.parse`` (Chat Completions and Responses),
pydantic-ai's ``NativeOutput`` and instructor (``Mode.JSON_SCHEMA``, in its own venv: its
pins do not fit the test venv's OpenAI SDK).

The models are scripted (:mod:`tests.support.scripted_gguf`, not recordings of a real model):
``think`` writes Qwen3-style ``<think>...</think>`` reasoning and then the JSON, served with
``tests/fixtures/scripted/think-template.jinja`` (reasoning as plain-text tags); ``plain`` writes
the JSON alone, served with a template without reasoning.  The reasoning model's answer is
held to the schema by a second request with llama.cpp's ``json_schema`` grammar that starts
after ``</think>``; the plain one's whole output is.  ``think-tool`` is QwQ-style: given tools
and a response format, it thinks, then calls ``get_weather`` (``<tool_call>`` after
``</think>``), and once the call is in its prompt answers the JSON: the call must run, over
Chat and Responses, through the OpenAI SDK, pydantic-ai's ``NativeOutput`` and the Agents SDK's
``output_type`` (issue 35, item 9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel as SdkResponsesModel
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.paths import FIXTURES, ROOT
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JSON = '{"city": "Paris", "temp_c": 21}'
THOUGHT = "The user wants the weather as JSON."
THINK = f"<think>{THOUGHT}</think>\n\n{JSON}<|return|>"
PLAIN = f"{JSON}<|return|>"
ASK = "Give me the weather as JSON."  # no "Paris": that token is the scripts' switch marker
PLAIN_TEMPLATE = ("{%- for m in messages -%}{%- if m.role == 'assistant' -%}<|start|>assistant"
                  "{%- else -%}<|start|>{{ m.role }}<|message|>{%- endif -%}{{ m.content or '' }}<|end|>"
                  "{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}")

# The tool-calling script: the city's rarest token ("Jy") is the switch from the call to the
# answer (tests/support/scripted_gguf.py), in no first prompt; the answer's keys come in the
# schema's order (llama.cpp's grammar keeps it).
CITY = "Jyväskylä"
TOOL_CALL = ('<think>Need the forecast first.</think>\n\n<tool_call>\n{"name":"get_weather",'
             f'"arguments":{{"city": "{CITY}"}}}}\n</tool_call><|call|>')
THINK_TOOL = f'{TOOL_CALL}<|start|>assistant{{"temp_c":21,"city":"{CITY}"}}<|return|>'
FORECAST = "Sunny and mild."

set_tracing_disabled(True)  # the Agents SDK would export traces to api.openai.com


class Weather(BaseModel):
    city: str
    temp_c: int


class Forecast(BaseModel):
    temp_c: int
    city: str


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("structured")
    (tmp / "plain.jinja").write_text(PLAIN_TEMPLATE)
    templates = {"think": FIXTURES / "scripted" / "think-template.jinja", "plain": tmp / "plain.jinja",
                 "think-tool": FIXTURES / "scripted" / "think-tools-template.jinja"}
    with llama_server(scripted_model("think-json", THINK)) as think, \
            llama_server(scripted_model("plain-json", PLAIN)) as plain, \
            llama_server(scripted_model("think-tool", THINK_TOOL)) as think_tool:
        lines = ["[upstream]", "read_timeout = 60.0", "", "[store]", 'path = ":memory:"', ""]
        for name, url in (("think", think), ("plain", plain), ("think-tool", think_tool)):
            lines += [f'[models."{name}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]',
                      "context_window = 4096", 'prompt_format = "template"',
                      f'[models."{name}".template]', f'path = "{templates[name]}"', ""]
        (tmp / "gateway.toml").write_text("\n".join(lines))
        with run_gateway(tmp / "gateway.toml") as running:
            yield running


@pytest.mark.parametrize("model", ["think", "plain"])
def test_openai_sdk_parse(gateway: Running, model: str) -> None:
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    chat = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": ASK}],
                                         response_format=Weather)
    message = chat.choices[0].message
    assert message.parsed == Weather(city="Paris", temp_c=21)
    assert getattr(message, "reasoning_content", None) == (THOUGHT if model == "think" else None)
    response = client.responses.parse(model=model, input=ASK, text_format=Weather)
    assert response.output_parsed == Weather(city="Paris", temp_c=21)
    kinds = [item.type for item in response.output]
    assert kinds == (["reasoning", "message"] if model == "think" else ["message"])


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_pydantic_ai_native_output(gateway: Running, api: str) -> None:
    provider = OpenAIProvider(openai_client=AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused",
                                                        max_retries=0))
    model = OpenAIChatModel("think", provider=provider) if api == "chat" else \
        OpenAIResponsesModel("think", provider=provider)
    agent = Agent(model, output_type=NativeOutput(Weather))
    result = await agent.run(ASK)
    assert result.output == Weather(city="Paris", temp_c=21)


def _instructor_python() -> Path:
    """A venv with instructor (and the OpenAI SDK version it pins), made once per checkout."""
    venv = ROOT / ".cache" / "instructor-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "instructor==1.17.0"],
                       check=True, timeout=600)
    return python


def test_instructor_json_schema_mode(gateway: Running) -> None:
    script = textwrap.dedent(f"""
        import instructor
        from openai import OpenAI
        from pydantic import BaseModel

        class Weather(BaseModel):
            city: str
            temp_c: int

        client = instructor.from_openai(OpenAI(base_url="{gateway.url}/v1", api_key="unused"),
                                        mode=instructor.Mode.JSON_SCHEMA)
        for model in ("think", "plain"):
            got = client.chat.completions.create(model=model, response_model=Weather, max_retries=0,
                                                 messages=[{{"role": "user", "content": {ASK!r}}}])
            print(model, got.model_dump_json())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    done = subprocess.run([str(_instructor_python()), "-c", script], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ['think {"city":"Paris","temp_c":21}',
                                           'plain {"city":"Paris","temp_c":21}'], done.stdout


WEATHER_TOOL: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
FORECAST_FORMAT: Any = {"type": "json_schema", "json_schema": {
    "name": "Forecast", "schema": Forecast.model_json_schema(), "strict": True}}


@pytest.mark.parametrize("thinking", [{"chat_template_kwargs": {"enable_thinking": True}},
                                      {"reasoning_effort": "high"}])
def test_openai_sdk_chat_tool_call_after_thinking_with_a_schema(gateway: Running,
                                                                 thinking: dict[str, Any]) -> None:
    """The issue's reproducer: the call after </think> comes back as the call (it was "stop" with
    the schema's JSON and no tool_calls), and the answer after the tool's output is the schema's."""
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": ASK}]
    first = client.chat.completions.create(model="think-tool", messages=messages, tools=[WEATHER_TOOL],
                                           response_format=FORECAST_FORMAT, extra_body=thinking)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls
    call: Any = choice.message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": CITY})
    assert getattr(choice.message, "reasoning_content", None) == "Need the forecast first."
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": FORECAST}]
    second = client.chat.completions.create(model="think-tool", messages=messages, tools=[WEATHER_TOOL],
                                            response_format=FORECAST_FORMAT, extra_body=thinking)
    assert second.choices[0].finish_reason == "stop"
    answer = Forecast.model_validate_json(second.choices[0].message.content or "")
    assert answer == Forecast(temp_c=21, city=CITY)


def test_openai_sdk_responses_tool_call_after_thinking_with_a_schema(gateway: Running) -> None:
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    tool: Any = {"type": "function", **WEATHER_TOOL["function"]}
    text: Any = {"format": {"type": "json_schema", **FORECAST_FORMAT["json_schema"]}}
    first = client.responses.create(model="think-tool", input=ASK, tools=[tool], text=text,
                                    reasoning={"effort": "high"})
    calls = [item for item in first.output if item.type == "function_call"]
    got = [(c.name, json.loads(c.arguments)) for c in calls]
    assert got == [("get_weather", {"city": CITY})], first.output
    assert first.output_text == ""
    replay: Any = [{"role": "user", "content": ASK},
                   *[item.model_dump(exclude_none=True) for item in first.output],
                   {"type": "function_call_output", "call_id": calls[0].call_id, "output": FORECAST}]
    second = client.responses.create(model="think-tool", tools=[tool], text=text, input=replay)
    assert Forecast.model_validate_json(second.output_text) == Forecast(temp_c=21, city=CITY)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_pydantic_ai_native_output_with_a_tool(gateway: Running, api: str) -> None:
    provider = OpenAIProvider(openai_client=AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused",
                                                        max_retries=0))
    model = OpenAIChatModel("think-tool", provider=provider) if api == "chat" else \
        OpenAIResponsesModel("think-tool", provider=provider)
    agent = Agent(model, output_type=NativeOutput(Forecast))
    cities: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Weather for a city."""
        cities.append(city)
        return FORECAST

    result = await agent.run(ASK)
    assert result.output == Forecast(temp_c=21, city=CITY)
    assert cities == [CITY]


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_agents_sdk_output_type_with_a_tool(gateway: Running, api: str) -> None:
    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        cities.append(city)
        return FORECAST

    model = OpenAIChatCompletionsModel("think-tool", client) if api == "chat" else \
        SdkResponsesModel("think-tool", client)
    agent = SdkAgent(name="weather", instructions="Answer with the forecast.", model=model,
                     tools=[get_weather], output_type=Forecast,
                     model_settings=ModelSettings(extra_body={"reasoning_effort": "high"} if api == "chat"
                                                  else None))
    result = await Runner.run(agent, ASK, max_turns=3)
    assert result.final_output == Forecast(temp_c=21, city=CITY)
    assert cities == [CITY]
