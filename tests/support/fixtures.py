"""Session fixtures: one real llama.cpp server per scripted model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.llama_server import llama_server
from tests.support.scripted_gguf import scripted_model

SCRIPT_FINAL = "<|channel|>final<|message|>Hello from a scripted tiny model!<|return|>"
SCRIPT_REASONING = ("<|channel|>analysis<|message|>The user greets me; reply politely.<|end|>"
                    "<|start|>assistant<|channel|>final<|message|>Hi there, friend!<|return|>")
SCRIPT_TOOL = ('<|channel|>commentary to=functions.get_weather <|constrain|>json'
               '<|message|>{"city":"Paris"}<|call|>')


@pytest.fixture(scope="session")
def llama_final() -> Iterator[str]:
    with llama_server(scripted_model("final", SCRIPT_FINAL)) as url:
        yield url


@pytest.fixture(scope="session")
def llama_reasoning() -> Iterator[str]:
    with llama_server(scripted_model("reasoning", SCRIPT_REASONING)) as url:
        yield url


@pytest.fixture(scope="session")
def llama_tool() -> Iterator[str]:
    with llama_server(scripted_model("tool", SCRIPT_TOOL)) as url:
        yield url
