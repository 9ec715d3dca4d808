"""SageMaker LMI: /invocations with a chat body (JSON or JSON lines) and /ping."""

from __future__ import annotations

import orjson

from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

MESSAGES = [{"role": "user", "content": "Say hello."}]


async def test_ping_and_non_streaming_without_model() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        assert (await c.get("/ping")).status_code == 200
        r = await c.post("/invocations", json={"messages": MESSAGES})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["choices"][0]["message"]["content"] == "Hello from a scripted tiny model!"


async def test_streaming_is_json_lines() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        r = await c.post("/invocations", json={"messages": MESSAGES, "stream": True, "model": MODEL})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/jsonlines")
    assert r.text.endswith("\n") and "data:" not in r.text and "[DONE]" not in r.text
    chunks = [orjson.loads(line) for line in r.text.splitlines()]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Hello from a scripted tiny model!"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_bad_bodies() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        for content, param in [(b'{"prompt": "hi"}', "messages"), (b"{nope", None),
                               (b'{"messages": [], "ignore_eos": true}', "messages"),
                               (b'{"messages": "x"}', "messages")]:
            r = await c.post("/invocations", content=content, headers={"content-type": "application/json"})
            assert r.status_code == 400, content
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["param"] == param


async def test_ignore_eos_reaches_the_backend() -> None:
    """Seed 003's ``ignore_eos`` (on /invocations and /v1/chat/completions): sent to llama.cpp and
    vLLM, which keep generating to max_tokens; the answer still ends at the model's end token.
    A backend that cannot do it refuses it by name."""
    user = [{"role": "user", "content": "hi"}]
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        for path in ("/invocations", "/v1/chat/completions"):
            r = await c.post(path, json={"model": MODEL, "messages": user, "ignore_eos": True,
                                         "max_tokens": 64})
            assert r.status_code == 200, r.text
            assert replay.requests[-1]["ignore_eos"] is True and replay.requests[-1]["n_predict"] == 64
            assert r.json()["choices"][0]["message"]["content"] == "Hello from a scripted tiny model!"
    vllm = Replay("03_completions_tokenids_stream_usage", "vllm")
    async with gateway(vllm.transport(), config(backend="vllm", upstream_model="tiny")) as c:
        await c.post("/v1/chat/completions", json={"model": MODEL, "messages": user, "ignore_eos": True})
        assert vllm.requests[-1]["ignore_eos"] is True
    async with gateway(replay.transport(), config(backend="ollama")) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": user, "ignore_eos": True})
        assert r.status_code == 400 and r.json()["error"]["param"] == "ignore_eos"
