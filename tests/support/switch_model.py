"""A fake llama.cpp whose Harmony output depends on its prompt (the unit tests' stand-in for
the scripted models of :mod:`tests.support.scripted_gguf`): it calls a tool until the tool's
result is in the prompt, then answers.  Its stream is the recorded llama.cpp wire shape of
:mod:`tests.support.fake_llamacpp`."""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import sse_events
from tests.support.wire import RecordedBody

Json = dict[str, Any]


def call(tool: str, args: Json, ns: str = "tools") -> str:
    return (f"<|channel|>analysis<|message|>I need {tool}.<|end|><|start|>assistant"
            f"<|channel|>commentary to={ns}.{tool} <|constrain|>json<|message|>{json.dumps(args)}<|call|>")


def answer(text: str) -> str:
    return f"<|channel|>final<|message|>{text}<|return|>"


def python(code: str) -> str:
    """A call of gpt-oss's built-in python tool: the code itself, from the analysis channel."""
    return f"<|channel|>analysis to=python<|message|>{code}<|call|>"


class Switch:
    """A fake llama.cpp whose script is chosen by what its prompt contains: the first rule
    whose marker is in the prompt wins, else ``default``."""

    def __init__(self, default: str, *rules: tuple[str, str]) -> None:
        self.default, self.rules = default, rules
        self.prompts: list[str] = []
        self.ids: list[list[int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        ids = json.loads(request.content)["prompt"]
        prompt = harmony_encoding().decode(ids)
        self.prompts.append(prompt)
        self.ids.append(ids)
        script = next((s for marker, s in self.rules if marker in prompt), self.default)
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=RecordedBody(sse_events(script), lambda: None))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)
