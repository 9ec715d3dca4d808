"""``n > 1`` on /v1/chat/completions and /invocations: one generation per choice, merged by index."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson

from app.main import create_app
from tests.support.asgi import AsgiPost, eventually
from tests.support.fake_llamacpp import sse_events
from tests.support.gateway import MODEL, config, gateway, sse_payloads
from tests.support.slow_upstream import EndlessUpstream
from tests.support.wire import RecordedBody, Replay

USER = [{"role": "user", "content": "hi"}]
ANSWER = "Hello from a scripted tiny model!"


async def test_non_streaming_lists_the_choices_and_sums_usage() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport()) as c:
        one = (await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})).json()
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "n": 3,
                                                       "seed": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [ch["index"] for ch in body["choices"]] == [0, 1, 2]
    assert all(ch["message"]["content"] == ANSWER and ch["finish_reason"] == "stop"
               for ch in body["choices"])
    assert [q.get("seed") for q in replay.requests[1:]] == [5, 6, 7]  # choice i samples with seed + i
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert body["usage"][field] == 3 * one["usage"][field]


async def test_streaming_interleaves_choices_one_finish_each_one_usage_one_done() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        r = await c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "n": 3, "stream": True,
            "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    payloads = sse_payloads(r.text)
    assert payloads[-1] == "[DONE]" and payloads.count("[DONE]") == 1
    chunks = payloads[:-1]
    usage = [ch for ch in chunks if ch.get("usage")]
    assert len(usage) == 1 and chunks[-1] is usage[0] and usage[0]["choices"] == []
    assert len({ch["id"] for ch in chunks}) == 1
    texts = {i: "" for i in range(3)}
    finishes: dict[int, list[str]] = {i: [] for i in range(3)}
    for ch in chunks[:-1]:
        (choice,) = ch["choices"]
        texts[choice["index"]] += choice["delta"].get("content") or ""
        if choice["finish_reason"]:
            finishes[choice["index"]].append(choice["finish_reason"])
    assert texts == {i: ANSWER for i in range(3)}
    assert finishes == {i: ["stop"] for i in range(3)}
    assert usage[0]["usage"]["completion_tokens"] == 3 * 11


async def test_n_above_the_cap_is_a_400_naming_n() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        for n in (9, 129, 0):
            r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "n": n})
            assert r.status_code == 400, (n, r.text)
            err = r.json()["error"]
            assert err["param"] == "n" and set(err) == {"message", "type", "param", "code"}
    cfg = config()
    cfg.limits.max_n = 2
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), cfg) as c:
        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "n": 3})
        assert r.status_code == 400 and "at most 2" in r.json()["error"]["message"]


async def test_invocations_takes_n_too() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        r = await c.post("/invocations", json={"messages": USER, "n": 2, "stream": True})
    lines = [orjson.loads(line) for line in r.text.splitlines()]
    finishes = sorted(ch["choices"][0]["index"] for ch in lines
                      if ch["choices"] and ch["choices"][0]["finish_reason"])
    assert finishes == [0, 1]


class _Mixed:
    """First generation request: an endless stream; the others: a stream cut mid-answer."""

    def __init__(self) -> None:
        self.endless = EndlessUpstream()
        self.posts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        self.posts += 1
        stream: httpx.AsyncByteStream = self.endless if self.posts == 1 else RecordedBody(
            sse_events("<|channel|>final<|message|>Hi there, friend", truncate_after=5))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


async def test_an_error_in_one_choice_ends_the_stream_and_cancels_the_others() -> None:
    upstream = _Mixed()
    async with gateway(httpx.MockTransport(upstream)) as c:
        r = await asyncio.wait_for(c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "n": 2, "stream": True}), 5)
        payloads = sse_payloads(r.text)
        assert payloads[-1] == "[DONE]"
        errors = [p for p in payloads[:-1] if "error" in p]
        assert len(errors) == 1 and errors[0] is payloads[-2]
        assert errors[0]["error"]["code"] == "stream_truncated"
        await eventually(lambda: upstream.endless.closed_at is not None, 2)
        assert upstream.endless.closed_at is not None  # the other generation was closed
        r = await asyncio.wait_for(c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "n": 2}), 5)
        assert r.status_code == 502 and r.json()["error"]["code"] == "stream_truncated"


async def test_a_client_disconnect_cancels_every_choice() -> None:
    upstreams: list[EndlessUpstream] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        upstreams.append(EndlessUpstream())
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=upstreams[-1])

    app = create_app(config(), transport=httpx.MockTransport(handler))

    def on_send(post: AsgiPost, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and b'"index":2' in message.get("body", b""):
            post.gone.set()

    for stream in (True, False):
        upstreams.clear()
        post = AsgiPost("/v1/chat/completions", {"model": MODEL, "messages": USER, "n": 3,
                                                 "stream": stream}, on_send)
        async with app.router.lifespan_context(app):
            task = post.start(app)
            if not stream:
                await eventually(lambda: len(upstreams) == 3
                                 and all(u.five_sent.is_set() for u in upstreams), 2)
                post.gone.set()
            await asyncio.wait_for(task, 5)
            await eventually(lambda: all(u.closed_at is not None for u in upstreams), 2)
        assert len(upstreams) == 3 and all(u.closed_at is not None for u in upstreams), stream


async def test_choices_share_admission_and_a_refused_one_frees_the_others() -> None:
    """Each choice holds a generation slot: with one slot and no queue, n=2 is a 503 (the
    first choice's slot is given back), and the next request still gets the slot."""
    cfg = config()
    cfg.limits.max_inflight = 1
    cfg.limits.max_queue = 0
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), cfg) as c:
        for stream in (False, True):
            r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                           "n": 2, "stream": stream})
            assert r.status_code == 503 and r.json()["error"]["code"] == "server_overloaded", r.text
            r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
            assert r.status_code == 200, r.text
