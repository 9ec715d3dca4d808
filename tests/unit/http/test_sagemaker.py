"""SageMaker LMI: /invocations with a chat body (JSON or JSON lines) and /ping."""

from __future__ import annotations

import orjson

from tests.support.gateway import MODEL, gateway
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
        for content, param in [(b'{"inputs": "hi"}', "messages"), (b"{nope", None),
                               (b'{"messages": [], "ignore_eos": true}', "ignore_eos"),
                               (b'{"messages": "x"}', "messages")]:
            r = await c.post("/invocations", content=content, headers={"content-type": "application/json"})
            assert r.status_code == 400, content
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["param"] == param
