"""Structured output through real clients on chat-template models, reasoning and not, on a
real llama.cpp server: the OpenAI SDK's ``.parse`` (Chat Completions and Responses),
pydantic-ai's ``NativeOutput`` and instructor (``Mode.JSON_SCHEMA``, in its own venv: its
pins do not fit the test venv's OpenAI SDK).

The models are scripted (:mod:`tests.support.scripted_gguf`, not recordings of a real model):
``think`` writes Qwen3-style ``<think>...</think>`` reasoning and then the JSON, served with
``tests/fixtures/scripted/think-template.jinja`` (reasoning as plain-text tags); ``plain`` writes
the JSON alone, served with a template without reasoning.  The reasoning model's answer is
held to the schema by a second request with llama.cpp's ``json_schema`` grammar that starts
after ``</think>``; the plain one's whole output is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
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


class Weather(BaseModel):
    city: str
    temp_c: int


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("structured")
    (tmp / "plain.jinja").write_text(PLAIN_TEMPLATE)
    templates = {"think": FIXTURES / "scripted" / "think-template.jinja", "plain": tmp / "plain.jinja"}
    with llama_server(scripted_model("think-json", THINK)) as think, \
            llama_server(scripted_model("plain-json", PLAIN)) as plain:
        lines = ["[upstream]", "read_timeout = 60.0", "", "[store]", 'path = ":memory:"', ""]
        for name, url in (("think", think), ("plain", plain)):
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
