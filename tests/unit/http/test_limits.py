"""Limits: 413 for big bodies, 429 with Retry-After for rpm / tpm / concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.config import GatewayConfig
from tests.support.gateway import MODEL, config, gateway
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.wire import Replay

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


def _cfg(**limits: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({**config().model_dump(), "limits": limits})


def _is_429(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert int(r.headers["retry-after"]) >= 1 and int(r.headers["retry-after-ms"]) >= 1


async def test_body_size_limit() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    async with gateway(replay.transport(), _cfg(max_body_bytes=2048)) as c:
        r = await c.post("/v1/chat/completions", json=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

        async def chunks() -> AsyncIterator[bytes]:  # no content-length: checked while reading
            yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}]}'

        r = await c.post("/v1/chat/completions", content=chunks(),
                         headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert len(replay.requests) == 1


async def test_requests_per_minute() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), _cfg(requests_per_minute=2)) as c:
        for _ in range(2):
            assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
        _is_429(await c.post("/v1/chat/completions", json=CHAT))
        assert (await c.get("/v1/models")).status_code == 200  # only generation routes are limited


async def test_tokens_per_minute() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), _cfg(tokens_per_minute=50)) as c:
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200  # uses 70 tokens
        _is_429(await c.post("/v1/chat/completions", json=CHAT))


async def test_concurrency_limit() -> None:
    upstream = EndlessUpstream()
    transport = endless_transport(upstream)
    async with gateway(transport, _cfg(max_concurrent=1)) as c:
        first = asyncio.ensure_future(c.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                                     "background": False}))
        await upstream.five_sent.wait()
        _is_429(await c.post("/v1/chat/completions", json=CHAT))
        first.cancel()


async def test_background_responses_hold_their_concurrency_slot_until_they_end() -> None:
    """A background run outlives its request: it keeps its key's slot until it ends."""
    async with gateway(endless_transport(EndlessUpstream()), _cfg(max_concurrent=2)) as c:
        ids = []
        for _ in range(2):
            r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "background": True})
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "background": True})
        _is_429(r)
        assert r.json()["error"]["code"] == "concurrency_limit_exceeded"
        r = await c.post("/v1/chat/completions", json=CHAT)  # any generation of the key
        assert r.status_code == 429
        assert (await c.post(f"/v1/responses/{ids[0]}/cancel")).status_code == 200
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "go", "background": True})
        assert r.status_code == 200, r.text  # the cancelled run gave its slot back
        for rid in (ids[1], r.json()["id"]):
            await c.post(f"/v1/responses/{rid}/cancel")


async def test_requests_per_minute_cover_every_route_that_writes_or_computes() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(),
                       _cfg(requests_per_minute=3)) as c:
        for _ in range(3):
            assert (await c.post("/v1/conversations", json={})).status_code == 200
        _is_429(await c.post("/v1/conversations", json={}))
        _is_429(await c.post("/tokenize", json={"model": MODEL, "prompt": "hi"}))
        _is_429(await c.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "hi"}))
        assert (await c.get("/v1/models")).status_code == 200  # reads are not counted


def test_a_refused_request_is_labelled_with_the_configured_model_it_asked_for() -> None:
    from app.http.limits import asked_model

    models = {"gpt-oss": "gpt-oss", "claude-haiku": "gpt-oss", "qwen": "qwen"}
    assert asked_model(b'{"messages": [], "model": "qwen"}', models) == "qwen"
    assert asked_model(b'{"model" : "claude-haiku", "stream": true}', models) == "gpt-oss"  # an alias
    # a made-up name is not a label (a flood of them must not make usage rows)
    assert asked_model(b'{"model": "made-up-1"}', models) is None
    # a nested "model" key before the top-level one: the first configured name wins
    body = b'{"tools": [{"parameters": {"model": "x"}}], "model": "gpt-oss"}'
    assert asked_model(body, models) == "gpt-oss"
    # at most 8 candidates are looked at, whatever the body holds
    assert asked_model(b'{"model": "n"}' * 100_000 + b'{"model": "qwen"}', models) is None
    assert asked_model(b'\\"model\\": \\"qwen\\"', models) is None  # inside a JSON string: escaped
