"""What the generation fuzzer (``test_fuzz_generation.py``) found, as explicit reproducers.

* One upstream stream event carrying 50,000-100,000 token ids (a hostile or batching backend; the
  ``huge_delta`` misbehaviour) blocked the event loop for 0.3-0.7 s (``/health`` with it) and
  goes out as one SSE event per token (22 MB).  Fixed in two steps: the run gives the loop back
  every 128 events (``YIELD_EVERY`` in ``app/engine/run.py``: 290-730 ms -> 160-200 ms; now
  every 32), and a huge chunk is fed to its parser in slices (``feed_slices``: 1,024 ids, or 8 KB
  of text), the loop given back between them (-> 15-30 ms on a quiet machine; a loaded one, load
  average 5-7 on 2 cores, sees 50-70 ms).  The same holds for a text-level parser (a
  template model) and for a call whose arguments are one huge chunk (the chat fold kept them
  with ``+=``: 4 s of copying for 100,000 deltas).
* ``DELETE /v1/responses/{id}`` of a background response whose run was still going answered
  ``200 {"deleted": true}``, yet ``GET`` still answered 200 and, when the run ended, the
  response was stored ``completed`` and readable for good (``test_fuzz_races.py`` found it).
  Fixed: the delete cancels the run and deletes once its end is stored.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import pytest

from tests.support.fuzz_bodies import HARMONY_MODEL, KEYS, PARAMS, TEMPLATE_MODEL, fuzz_config
from tests.support.gateway import gateway, sse_payloads
from tests.support.hostile_upstream import (
    HELLO,
    HostileLlamaCpp,
    _Body,
    _event,
    _final,
    harmony_events,
    text_events,
)

N = 100_000
LOOP_BUDGET = 0.05  # seconds: the bar for /health
WORD = 3999  # a token id for the template model's text (its count is all that matters)


def _harmony_text() -> list[bytes]:
    return [*harmony_events("<|channel|>final<|message|>"), _event("Hello" * N, [HELLO] * N, 4),
            *harmony_events("<|return|>"), _final(N + 4)]


def _harmony_call() -> list[bytes]:
    """A call whose arguments (100,000 tokens: a file an agent writes) are one chunk."""
    head = harmony_events(
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "')
    return [*head, _event("Hello" * N, [HELLO] * N, 4), *harmony_events('"}<|call|>'), _final(N + 4)]


def _template_text() -> list[bytes]:
    return [*text_events(["</think>"]), _event("Hello" * N, [WORD] * N, 4), _final(N + 4)]


def _template_call() -> list[bytes]:
    call = json.dumps({"name": "get_weather", "arguments": {"city": "Hello" * N}})
    return [*text_events(["</think>", "<tool_call>\n"]), _event(call, [WORD] * N, 4),
            *text_events(["\n</tool_call>"]), _final(N + 4)]


class _Upstream(httpx.MockTransport):
    """Answers ``/completion`` with ``chunks``, noting when (the rest: the hostile fake's)."""

    def __init__(self, chunks: Callable[[], list[bytes]]) -> None:
        other = HostileLlamaCpp()  # the template model's /props and /tokenize
        self.asked = float("inf")

        def answer(request: httpx.Request) -> httpx.Response:
            if request.method == "GET" or request.url.path != "/completion":
                return other(request)
            self.asked = time.monotonic()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Body(chunks()))

        super().__init__(answer)


async def _worst_gap(upstream: _Upstream, path: str, body: dict[str, object]) -> tuple[httpx.Response, float]:
    """The response, and the event loop's longest gap from the moment the upstream is asked
    to generate (rendering and tokenizing the request are other tests' subject; this fake's
    tokenizer runs on the same loop) until the gateway has sent the whole response."""
    gaps: list[tuple[float, float]] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append((now, now - last))
            last = now

    async with gateway(upstream, fuzz_config()) as c:
        ticker = asyncio.create_task(tick())
        async with c.stream("POST", path, json=body, headers={"authorization": f"Bearer {KEYS['a']}"}) as r:
            ticker.cancel()  # (the test client has the whole body: joining its 21 MB is not the gateway's)
            await r.aread()
    return r, max(gap for end, gap in gaps if end > upstream.asked)


CHAT = {"messages": [{"role": "user", "content": "hi"}]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMS}


def _chat_text(r: httpx.Response, stream: bool) -> tuple[str, str]:
    """The answer's text and its one call's arguments (chat, streamed or not)."""
    if not stream:
        message = r.json()["choices"][0]["message"]
        calls = message.get("tool_calls") or [{"function": {"arguments": ""}}]
        return message["content"] or "", calls[0]["function"]["arguments"]
    payloads = sse_payloads(r.text)
    assert payloads[-1] == "[DONE]" and not any("error" in p for p in payloads[:-1]), r.text[-500:]
    deltas = [p["choices"][0]["delta"] for p in payloads[:-1] if p["choices"]]
    return ("".join(d.get("content") or "" for d in deltas),
            "".join(c["function"]["arguments"] for d in deltas for c in d.get("tool_calls") or []))


def _responses_text(r: httpx.Response, stream: bool) -> tuple[str, str]:
    if stream:
        payloads = sse_payloads(r.text)
        assert payloads.pop() == "[DONE]" and payloads[-1]["type"] == "response.completed", r.text[-500:]
        resource = payloads[-1]["response"]
    else:
        resource = r.json()
    assert resource["status"] == "completed", resource.get("error")
    text = "".join(c["text"] for item in resource["output"] if item["type"] == "message"
                   for c in item["content"])
    args = "".join(item["arguments"] for item in resource["output"] if item["type"] == "function_call")
    return text, args


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize(
    ("model", "chunks", "call"),
    [(HARMONY_MODEL, _harmony_text, False), (HARMONY_MODEL, _harmony_call, True),
     (TEMPLATE_MODEL, _template_text, False), (TEMPLATE_MODEL, _template_call, True)],
    ids=["harmony-text", "harmony-call", "template-text", "template-call"],
)
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_one_huge_upstream_event_does_not_block_the_event_loop(
    api: str, model: str, chunks: Callable[[], list[bytes]], call: bool, stream: bool
) -> None:
    """The best of up to 3 runs is within the budget (a run over it is measured again: a busy
    machine's one-off pause is noise, a parser that holds the loop for the whole chunk is over
    it every time: 160-700 ms before the slicing)."""
    gaps = []
    for _ in range(3):
        if api == "chat":
            body: dict[str, object] = {"model": model, **CHAT, "stream": stream,
                                       **({"tools": [CHAT_TOOL]} if call else {})}
            r, gap = await _worst_gap(_Upstream(chunks), "/v1/chat/completions", body)
            assert r.status_code == 200, r.text[:300]
            text, args = _chat_text(r, stream)
        else:
            body = {"model": model, "input": "hi", "stream": stream,
                    **({"tools": [RESPONSES_TOOL]} if call else {})}
            r, gap = await _worst_gap(_Upstream(chunks), "/v1/responses", body)
            assert r.status_code == 200, r.text[:300]
            text, args = _responses_text(r, stream)
        if call:  # every character of the one chunk arrived, in order
            assert json.loads(args) == {"city": "Hello" * N} and not text
        else:
            assert text == "Hello" * N
        gaps.append(gap)
        if gap < LOOP_BUDGET:
            break
    gap = min(gaps)
    assert gap < LOOP_BUDGET, f"the event loop was blocked {gap:.3f} s"


@pytest.mark.parametrize("wait", [0.0, 0.05])
async def test_a_response_deleted_during_its_run_stays_deleted(wait: float) -> None:
    upstream = HostileLlamaCpp()
    headers = {"authorization": f"Bearer {KEYS['a']}"}
    async with gateway(upstream.transport(), fuzz_config()) as c:
        upstream.reseed(0, ["slow"])  # a valid answer, one event every 10 ms
        r = await c.post("/v1/responses", json={"model": "gpt-oss-test", "input": "hi", "background": True},
                         headers=headers)
        rid = r.json()["id"]
        await asyncio.sleep(wait)
        deleted = await c.delete(f"/v1/responses/{rid}", headers=headers)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        await asyncio.sleep(0.5)  # the run has ended
        after = await c.get(f"/v1/responses/{rid}", headers=headers)
    assert after.status_code == 404, f"deleted, yet {after.status_code} {after.text[:200]}"
