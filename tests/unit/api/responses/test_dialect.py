"""Event dialects: OpenAI's SDKs get OpenAI's names, everyone else the Open Responses ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.datastructures import Headers

from app.api.responses.dialect import OPEN_RESPONSES, OPENAI, choose
from tests.support.chat_fakes import FakeChat, Script
from tests.support.gateway import MODEL, config, gateway
from tests.unit.http.test_midstream_errors import transport as times_out

SDK = {"user-agent": "OpenAI/Python 2.8.1", "x-stainless-lang": "python", "x-stainless-os": "Linux"}


@pytest.mark.parametrize(("setting", "headers", "expected"), [
    ("auto", SDK, OPENAI),
    ("auto", {"user-agent": "curl/8.5"}, OPEN_RESPONSES),
    # tests/fixtures/codex/first_request.json: what the Codex CLI 0.169 sends
    ("auto", {"originator": "codex_exec", "user-agent": "codex_exec/0.169.0 (Debian 12.0.0; x86_64)"},
     OPENAI),
    ("auto", {"user-agent": "codex_cli_rs/0.169.0"}, OPENAI),
    ("auto", {"user-agent": "litellm/1.80.0"}, OPENAI),  # litellm's own HTTP client
    ("auto", {"user-agent": "Bun/1.2.0"}, OPEN_RESPONSES),  # the compliance suite's runtime
    ("auto", {}, OPEN_RESPONSES),
    ("auto", {**SDK, "ocm-event-dialect": "openresponses"}, OPEN_RESPONSES),
    ("openresponses", SDK, OPEN_RESPONSES),
    ("openai", {}, OPENAI),
    ("openai", {"OCM-Event-Dialect": "OpenResponses"}, OPEN_RESPONSES),
])
def test_choose(setting: str, headers: dict[str, str], expected: Any) -> None:
    assert choose(setting, Headers(headers)) is expected


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.mark.asyncio
@pytest.mark.parametrize("headers", [SDK, {}], ids=["openai-sdk", "raw"])
async def test_reasoning_events_are_named_for_the_client(headers: dict[str, str]) -> None:
    script = Script([("reasoning", "Think"), ("reasoning", " more."), ("text", "Hi!")])
    fake = FakeChat(script, "openai")
    async with gateway(fake.transport(), config(backend="openai", prompt_format="chat",
                                                upstream_model="qwen3")) as c:
        r = await c.post("/v1/responses", headers=headers,
                         json={"model": MODEL, "input": "hi", "stream": True})
    types = [e["type"] for e in _events(r.text)]
    prefix = "response.reasoning_text" if headers else "response.reasoning"
    assert types.count(f"{prefix}.delta") == 2 and types.count(f"{prefix}.done") == 1
    other = "response.reasoning" if headers else "response.reasoning_text"
    assert not any(t.startswith(f"{other}.") for t in types)
    assert types[-1] == "response.completed"


@pytest.mark.asyncio
@pytest.mark.parametrize("headers", [SDK, {}], ids=["openai-sdk", "raw"])
async def test_the_error_event_has_the_shape_the_client_reads(headers: dict[str, str]) -> None:
    async with gateway(times_out()) as c:
        r = await c.post("/v1/responses", headers=headers,
                         json={"model": MODEL, "input": "hi", "stream": True})
    [error] = [e for e in _events(r.text) if e["type"] == "error"]
    assert error["error"]["code"] == "upstream_timeout"  # nested: the Open Responses shape
    if headers:  # flat too: OpenAI's ResponseErrorEvent(code, message, param)
        assert error["code"] == "upstream_timeout" and error["message"] and "param" in error
    else:
        assert set(error) == {"type", "sequence_number", "error"}
