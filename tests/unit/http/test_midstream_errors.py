"""A failure after generation started means the same on both APIs, streamed or not.

The backend (a llama.cpp stream) sends the start of a Harmony answer, then its connection
times out.  Non-streaming answers are the fold of the stream, so both APIs answer with the
error's own status (504 ``upstream_timeout``), and streams end with their API's error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.gateway import MODEL, gateway, sse_payloads

pytestmark = pytest.mark.asyncio


class TimesOut(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        for tok in (200005, 17196, 200008, 13225):  # <|channel|>final<|message|>Hello
            yield b"data: " + json.dumps({"content": "x", "tokens": [tok], "stop": False}).encode() + b"\n\n"
        raise httpx.ReadTimeout("the backend stopped sending")


def transport() -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=TimesOut())
    return httpx.MockTransport(handler)


CHAT = ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
RESPONSES = ("/v1/responses", {"model": MODEL, "input": "hi"})


@pytest.mark.parametrize(("path", "body"), [CHAT, RESPONSES], ids=["chat", "responses"])
async def test_non_streaming_answer_has_the_errors_own_status(path: str, body: dict[str, object]) -> None:
    async with gateway(transport()) as c:
        r = await c.post(path, json=body)
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "upstream_timeout"
    assert r.json()["error"]["type"] == "server_error"


@pytest.mark.parametrize(("path", "body"), [CHAT, RESPONSES], ids=["chat", "responses"])
async def test_stream_ends_with_one_error_terminal(path: str, body: dict[str, object]) -> None:
    async with gateway(transport()) as c:
        r = await c.post(path, json={**body, "stream": True})
    assert r.status_code == 200
    payloads = sse_payloads(r.text)
    assert payloads[-1] == "[DONE]"
    if path == CHAT[0]:
        errors = [p for p in payloads[:-1] if "error" in p]
        assert len(errors) == 1 and errors[0] is payloads[-2]
        assert errors[0]["error"]["code"] == "upstream_timeout"
    else:
        types = [p["type"] for p in payloads[:-1]]
        assert types[-2:] == ["error", "response.failed"] and types.count("response.failed") == 1
        assert payloads[-3]["error"]["code"] == "upstream_timeout"
