"""Anthropic's ``web_fetch_20250910`` server tool on /v1/messages, with the official
``anthropic`` SDK: the model calls ``web_fetch``, the gateway fetches from a real HTTP server on
loopback under ``[media] allowed_urls`` and answers with ``server_tool_use`` and
``web_fetch_tool_result`` blocks (typed by the SDK, streamed and not), counted in
``usage.server_tool_use.web_fetch_requests``.  Refusals the model reads (Anthropic's error
codes): a URL the conversation never showed, a blocked domain, a URL outside the operator's
list, a server error, ``max_uses``.  Without ``allowed_urls`` the tool is a 400; the fetched
block sent back on the next turn is accepted; later code execution and fetch versions are a 400
naming the versions this gateway runs.  The model is the prompt-dependent
fake of :mod:`tests.support.switch_model`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from app.config import GatewayConfig
from tests.support.anthropic_sdk import clients
from tests.support.gateway import MODEL, config, sse_payloads
from tests.support.http_thread import serving, static
from tests.support.switch_model import Switch, answer, call

PAGE = (b"<html><head><title>Walrus facts</title><script>var x = 1;</script></head>"
        b"<body><h1>Walruses</h1><p>Walruses sleep in the water.</p></body></html>")
FETCH: Any = {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 3}


_SITE = static({"/docs/walrus.html": (200, "text/html; charset=utf-8", PAGE),
                "/docs/notes.txt": (200, "text/plain", b"Plain notes."),
                "/docs/broken": (500, "text/plain", b"oops"),
                "/docs/image.png": (200, "image/png", b"\x89PNG\r\n\x1a\n"),
                "/private/key.txt": (200, "text/plain", b"do not leak")})


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serving(_SITE) as url:
        yield url


def cfg(site: str, allowed: bool = True) -> GatewayConfig:
    c = config(context_window=16384)
    media = {"allowed_urls": [f"{site}/docs/"]} if allowed else {}
    return c.model_copy(update={"media": c.media.model_validate(media)})


def fetching(url: str) -> Switch:
    """Fetches ``url`` until the fetch's outcome is in the prompt, then answers."""
    return Switch(call("web_fetch", {"url": url}, ns="functions"),
                  ("Walruses sleep", answer("They sleep in the water.")),
                  ("Not fetched", answer("I could not read it.")))


def ask(url: str) -> Any:
    return [{"role": "user", "content": f"What does {url} say?"}]


async def test_a_fetch_runs_and_comes_back_as_server_blocks(site: str) -> None:
    url = f"{site}/docs/walrus.html"
    model = fetching(url)
    async with clients(model.transport(), cfg(site)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ask(url), tools=[FETCH])
    assert [b.type for b in msg.content] == ["thinking", "server_tool_use", "web_fetch_tool_result", "text"]
    use, result, text = msg.content[1], msg.content[2], msg.content[3]
    assert use.type == "server_tool_use" and use.name == "web_fetch" and use.input == {"url": url}
    assert result.type == "web_fetch_tool_result" and result.tool_use_id == use.id
    fetched = result.content
    assert fetched.type == "web_fetch_result" and fetched.url == url and fetched.retrieved_at
    assert fetched.content.type == "document" and fetched.content.title == "Walrus facts"
    assert fetched.content.source.type == "text"
    assert fetched.content.source.data == "Walruses\nWalruses sleep in the water."  # no script, no head
    assert text.type == "text" and text.text == "They sleep in the water."
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_fetch_requests == 1
    assert len(model.prompts) == 2 and "Walruses sleep in the water." in model.prompts[1]
    assert "web_fetch" in model.prompts[0]


async def test_the_stream_parses_into_the_sdk_types(site: str) -> None:
    url = f"{site}/docs/notes.txt"
    async with clients(Switch(call("web_fetch", {"url": url}, ns="functions"),
                              ("Plain notes.", answer("Notes read."))).transport(), cfg(site)) as c:
        async with c.sdk.messages.stream(model=MODEL, max_tokens=1000, messages=ask(url),
                                         tools=[FETCH]) as stream:
            final = await stream.get_final_message()
        raw = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 1000, "messages": ask(url), "tools": [FETCH], "stream": True})
    assert [b.type for b in final.content] == ["thinking", "server_tool_use", "web_fetch_tool_result", "text"]
    use = final.content[1]
    assert use.type == "server_tool_use" and use.input == {"url": url}
    events = [TypeAdapter(RawMessageStreamEvent).validate_python(e) for e in sse_payloads(raw.text)
              if e.get("type") != "ping"]
    results = [e.content_block for e in events if e.type == "content_block_start"
               and e.content_block.type == "web_fetch_tool_result"]
    assert len(results) == 1 and results[0].content.type == "web_fetch_result"
    assert results[0].content.content.source.data == "Plain notes."


@pytest.mark.parametrize(("target", "tool", "code"), [
    ("/docs/other.html", FETCH, "url_not_in_prior_context"),  # the model made the URL up
    ("/docs/walrus.html", {**FETCH, "blocked_domains": ["127.0.0.1"]}, "url_not_allowed"),
    ("/private/key.txt", FETCH, "url_not_allowed"),  # outside [media] allowed_urls
    ("/docs/broken", FETCH, "url_not_accessible"),
    ("/docs/image.png", FETCH, "unsupported_content_type"),
])
async def test_a_refused_fetch_is_an_error_block_the_model_reads(site: str, target: str, tool: Any,
                                                                 code: str) -> None:
    shown = f"{site}/docs/walrus.html" if code == "url_not_in_prior_context" else f"{site}{target}"
    model = fetching(f"{site}{target}")
    async with clients(model.transport(), cfg(site)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ask(shown), tools=[tool])
    result = msg.content[2]
    assert result.type == "web_fetch_tool_result" and result.content.type == "web_fetch_tool_result_error"
    assert result.content.error_code == code
    assert msg.content[3].type == "text" and msg.content[3].text == "I could not read it."
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_fetch_requests == 0
    assert "do not leak" not in "".join(model.prompts)


async def test_max_uses_bounds_the_fetches(site: str) -> None:
    url = f"{site}/docs/walrus.html"
    model = Switch(call("web_fetch", {"url": url}, ns="functions"),
                   ("may be used at most 1 times", answer("Enough.")))  # fetches until refused
    once: Any = {**FETCH, "max_uses": 1}
    async with clients(model.transport(), cfg(site)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ask(url), tools=[once])
    results = [b for b in msg.content if b.type == "web_fetch_tool_result"]
    assert [r.content.type for r in results] == ["web_fetch_result", "web_fetch_tool_result_error"]
    assert results[1].content.type == "web_fetch_tool_result_error"
    assert results[1].content.error_code == "max_uses_exceeded"
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_fetch_requests == 1


async def test_a_fetch_sent_back_is_read_as_that_calls_output(site: str) -> None:
    url = f"{site}/docs/walrus.html"
    model = Switch(call("web_fetch", {"url": url}, ns="functions"),
                   ("Walruses sleep", answer("From the page.")))
    async with clients(model.transport(), cfg(site)) as c:
        first = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ask(url), tools=[FETCH])
        back: Any = first.model_dump(exclude_none=True)["content"]
        again = await c.sdk.messages.create(model=MODEL, max_tokens=1000, tools=[FETCH], messages=[
            *ask(url), {"role": "assistant", "content": back}, {"role": "user", "content": "And so?"}])
    # no second fetch: the page's text came back in the block and is in the prompt
    assert [(b.type, getattr(b, "text", None)) for b in again.content] == [("text", "From the page.")]
    assert len(model.prompts) == 3 and "Walruses sleep in the water." in model.prompts[2]
    assert again.usage.server_tool_use is not None and again.usage.server_tool_use.web_fetch_requests == 0


async def test_without_allowed_urls_the_tool_is_a_400(site: str) -> None:
    url = f"{site}/docs/walrus.html"
    async with clients(fetching(url).transport(), cfg(site, allowed=False)) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.sdk.messages.create(model=MODEL, max_tokens=100, messages=ask(url), tools=[FETCH])
    assert "[media] allowed_urls" in str(caught.value)


@pytest.mark.parametrize("tool", [{"type": "code_execution_20260120", "name": "code_execution"},
                                  {"type": "web_fetch_20260209", "name": "web_fetch"}])
async def test_unsupported_versions_are_a_400_naming_the_supported_ones(site: str, tool: Any) -> None:
    async with clients(fetching("x").transport(), cfg(site)) as c:
        r = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 100, "messages": ask("x"), "tools": [tool]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and tool["type"] in error["message"]
    for supported in ("web_search_*", "code_execution_20250522", "code_execution_20250825",
                      "web_fetch_20250910"):
        assert supported in error["message"], error
