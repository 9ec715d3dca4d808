"""``logit_bias`` (seed 003, OpenAI): token ids checked and forwarded to the backends that take
them, refused by name where a backend cannot."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

USER = [{"role": "user", "content": "hi"}]


async def test_logit_bias_reaches_llamacpp_vllm_and_openai_upstreams() -> None:
    bias = {"40617": -100, "13": 5.5}
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                       "logit_bias": bias})
        assert r.status_code == 200, r.text
    assert replay.requests[-1]["logit_bias"] == [[40617, -100.0], [13, 5.5]]
    vllm = Replay("03_completions_tokenids_stream_usage", "vllm")
    async with gateway(vllm.transport(), config(backend="vllm", upstream_model="tiny")) as c:
        await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "logit_bias": bias})
    assert vllm.requests[-1]["logit_bias"] == {"40617": -100.0, "13": 5.5}
    chat = Replay("07b_chat_stream", "vllm")
    async with gateway(chat.transport(), config(backend="openai", upstream_model="tiny")) as c:
        await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "logit_bias": bias})
    assert chat.requests[-1]["logit_bias"] == {"40617": -100.0, "13": 5.5}


@pytest.mark.parametrize(("bias", "param"), [
    ({"hello": 1}, "logit_bias.hello"),
    ({"-5": 1}, "logit_bias.-5"),
    ({"13": 101}, "logit_bias.13"),
    ({"999999": 1}, "logit_bias.999999"),  # outside the Harmony model's vocabulary
    ({str(i): 1 for i in range(1025)}, "logit_bias"),
])
async def test_bad_logit_bias_is_a_400_naming_it(bias: dict[str, Any], param: str) -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                       "logit_bias": bias})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


async def test_a_backend_without_logit_bias_refuses_it_by_name() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(),
                       config(backend="ollama")) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                       "logit_bias": {"13": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias"
