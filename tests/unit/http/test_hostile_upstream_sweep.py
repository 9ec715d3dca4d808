"""Every misbehaviour of the hostile upstream (``tests/support/hostile_upstream.py``) on every
prompt format (Harmony, a chat template, an OpenAI-compatible chat server), through Chat
Completions and Responses, streamed and not: the deterministic floor under the stateful fuzzer
of ``test_fuzz_generation.py``. No 500, error bodies in the envelope, one terminal per stream,
and the streamed answer folds to the non-streamed one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import fuzz_bodies as fb
from tests.support.fuzz_bodies import KEYS, fuzz_config
from tests.support.fuzz_checks import chat_fold, chat_shape, check_status, responses_events, responses_shape
from tests.support.gateway import gateway
from tests.support.hostile_upstream import BEHAVIOURS, HostileLlamaCpp

MODELS = [fb.HARMONY_MODEL, fb.TEMPLATE_MODEL, fb.CHAT_MODEL]
AUTH = {"authorization": f"Bearer {KEYS['a']}"}
TOOLS_CHAT = [{"type": "function", "function": {"name": "get_weather", "parameters": fb.PARAMS}}]
TOOLS_RESPONSES = [
    {"type": "function", "name": "get_weather", "parameters": fb.PARAMS},
    {"type": "custom", "name": "run_code"},
    {
        "type": "namespace",
        "name": "ns",
        "description": "n",
        "tools": [{"type": "function", "name": "inner", "parameters": fb.PARAMS}],
    },
]


async def _both(path: str, body: dict[str, Any], behaviour: str) -> tuple[Any, Any]:
    up = HostileLlamaCpp()
    up.tools = ["get_weather", "run_code", "ns__inner"]
    async with gateway(up.transport(), fuzz_config()) as c:
        up.reseed(7, [behaviour])
        whole = await c.post(path, json=body, headers=AUTH)
        up.reseed(7, [behaviour])
        streamed = await c.post(path, json={**body, "stream": True}, headers=AUTH)
    assert up.generations >= 2
    check_status(whole)
    check_status(streamed)
    return whole, streamed


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
async def test_chat(model: str, behaviour: str) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": TOOLS_CHAT,
        "max_tokens": 64,
    }
    whole, streamed = await _both("/v1/chat/completions", body, behaviour)
    if streamed.status_code != 200:
        assert streamed.status_code == whole.status_code, (whole.text, streamed.text)
        return
    fold = chat_fold(streamed.text)
    expected = (
        chat_shape(whole.json()) if whole.status_code == 200 else {"error": whole.json()["error"]["code"]}
    )
    assert fold == expected


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
async def test_responses(model: str, behaviour: str) -> None:
    body = {"model": model, "input": "hi", "tools": TOOLS_RESPONSES, "max_output_tokens": 64, "store": False}
    whole, streamed = await _both("/v1/responses", body, behaviour)
    if streamed.status_code != 200:
        assert streamed.status_code == whole.status_code, (whole.text, streamed.text)
        return
    final = responses_events(streamed)[1]
    if whole.status_code == 200:
        assert responses_shape(final) == responses_shape(whole.json())
    else:
        assert final["status"] == "failed" and final["error"]["code"] == whole.json()["error"]["code"]
