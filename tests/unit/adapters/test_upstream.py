"""The hot path's thin upstream client (adapters/upstream.py) against real local servers.

A generation's streamed POST runs on aiohttp straight on the pooled connection; these tests
hold it to the guarantees of adapters/aiohttp_transport.py through ``post_stream`` (what the
backends call) and the seam itself: an aiohttp web server for the ordinary answers, raw
asyncio sockets (:mod:`tests.support.raw_http`) where a test needs exact bytes and timing (a
stall, a cut, keep-alive).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, cast

import httpx
import pytest
from aiohttp import web

from adapters.aiohttp_transport import AiohttpUpstream
from adapters.transport import post_stream
from adapters.upstream import HttpxUpstream, PooledClient, upstream_for
from app.core.errors import UpstreamError, UpstreamRateLimited, UpstreamTimeout
from app.main import create_app
from tests.support import raw_http as raw
from tests.support.asgi import AsgiPost, eventually
from tests.support.gateway import MODEL, config, sse_payloads
from tests.support.loopback_upstream import LoopbackUpstream
from tests.unit.http.test_overload import ANSWER, CHAT

pytestmark = pytest.mark.asyncio


def pooled(read: float = 5.0, pool: float = 2.0, connections: int = 10) -> PooledClient:
    return PooledClient(httpx.Limits(max_connections=connections),
                        httpx.Timeout(connect=2.0, read=read, write=2.0, pool=pool))


class Upstream:
    """An aiohttp web server that streams SSE like llama.cpp and records what it saw."""

    def __init__(self) -> None:
        self.heads: list[dict[str, str]] = []
        self.bodies: list[bytes] = []
        self.peers: set[tuple[str, int]] = set()
        self.gone = asyncio.Event()
        self.events = 3
        self.gap = 0.0

    async def completion(self, request: web.Request) -> web.StreamResponse:
        self.heads.append(dict(request.headers))
        self.bodies.append(await request.read())
        self.peers.add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i in range(self.events):
                await response.write(b'data: {"i": %d}\n\n' % i)
                await asyncio.sleep(self.gap)
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.gone.set()  # the client went away: llama.cpp would stop generating here
            raise
        await response.write_eof()
        return response

    async def busy(self, request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "slow down", "type": "rate_limit"}},
                                 status=429, headers={"retry-after": "7"})


async def props(request: web.Request) -> web.Response:
    return web.json_response({"n_ctx": 4096})


@asynccontextmanager
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    app = web.Application()
    app.router.add_post("/completion", up.completion)
    app.router.add_post("/busy", up.busy)
    app.router.add_get("/props", props)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield up, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def opened(client: httpx.AsyncClient, url: str, **kw: Any) -> AsyncGenerator[dict[str, Any], None]:
    """The backends' streamed POST (``{"prompt": [1, 2]}`` to a llama.cpp)."""
    return cast(AsyncGenerator[dict[str, Any], None],
                post_stream(client, url, {"prompt": [1, 2]}, "llama.cpp", **kw))


async def events(client: httpx.AsyncClient, url: str, **kw: Any) -> list[dict[str, Any]]:
    async with aclosing(opened(client, url, **kw)) as it:
        return [event async for event in it]


def no_httpx_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refused(*args: object, **kw: object) -> httpx.Response:
        raise AssertionError("the hot path went through httpx")

    monkeypatch.setattr(httpx.AsyncClient, "send", refused)


async def test_the_gateway_client_streams_on_aiohttp_and_any_other_client_on_httpx() -> None:
    async with pooled() as c, httpx.AsyncClient(transport=httpx.MockTransport(
            lambda r: httpx.Response(200))) as mock:
        assert isinstance(upstream_for(c), AiohttpUpstream)
        assert isinstance(upstream_for(mock), HttpxUpstream)


async def test_events_arrive_without_httpx_and_the_request_is_intact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    no_httpx_requests(monkeypatch)
    async with upstream() as (up, url), pooled() as c:
        got = await events(c, url + "/completion", headers={"authorization": "Bearer k"})
    assert got == [{"i": 0}, {"i": 1}, {"i": 2}]
    head = {k.lower(): v for k, v in up.heads[0].items()}
    assert up.bodies == [b'{"prompt":[1,2]}']
    assert head["content-type"] == "application/json" and head["accept"] == "text/event-stream"
    assert head["authorization"] == "Bearer k" and head["accept-encoding"] == "identity"
    assert head["user-agent"] == c.headers["user-agent"]  # the httpx client's defaults, as before


async def test_bytes_are_handed_on_as_they_arrive() -> None:
    second = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw.HEAD + raw.chunk(b'data: {"n": 1}\n\n'))
        await writer.drain()
        await second.wait()  # event 2 exists only once the client has seen event 1
        writer.write(raw.chunk(b'data: {"n": 2}\n\n') + b"0\r\n\r\n")
        await writer.drain()

    got = []
    async with raw.serving(handler) as (_, url), pooled() as c, aclosing(opened(c, url)) as stream:
        async for event in stream:
            got.append(event)
            second.set()
    assert got == [{"n": 1}, {"n": 2}]


async def test_a_stream_read_to_its_end_leaves_the_connection_for_the_next_request() -> None:
    async with upstream() as (up, url), pooled() as c:
        for _ in range(5):
            assert len(await events(c, url + "/completion", is_last=lambda e: e["i"] == 2)) == 3
        assert (await c.get(url + "/props")).json() == {"n_ctx": 4096}  # httpx: the same pool
    assert len(up.bodies) == 5 and len(up.peers) == 1


async def test_leaving_a_stream_early_drops_the_connection_so_the_upstream_stops() -> None:
    async with upstream() as (up, url), pooled() as c:
        up.events, up.gap = 1000, 0.01
        async with aclosing(opened(c, url + "/completion")) as stream:
            async for _ in stream:
                break  # the gateway's client disconnected after the first event
        await asyncio.wait_for(up.gone.wait(), 2.0)


async def test_silence_mid_stream_is_an_upstream_timeout() -> None:
    async with raw.serving(raw.stalls_after(b'data: {"n": 1}\n\n')) as (_, url), pooled(read=0.3) as c:
        with pytest.raises(UpstreamTimeout, match="ReadTimeout"):
            await events(c, url)


async def test_a_connection_dropped_mid_stream_is_a_read_error() -> None:
    async with raw.serving(raw.cut_after(b'data: {"n": 1}\n\n')) as (_, url), pooled() as c:
        # httpx's types, as httpx's own transport names a cut: a lost connection, or a body
        # that ended before its chunked encoding did
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            async with upstream_for(c).stream(url, b"{}", {}) as r:
                async for _ in r.aiter_raw():
                    pass
        with pytest.raises(UpstreamError, match=r"ReadError|RemoteProtocolError") as caught:
            await events(c, url)
    assert caught.value.code != "upstream_unavailable"  # it connected: not a down backend


async def test_nobody_listening_is_upstream_unavailable() -> None:
    url = await raw.nobody_listening()
    async with pooled() as c:
        with pytest.raises(UpstreamError) as caught:
            await events(c, f"{url}/completion")
    assert caught.value.code == "upstream_unavailable"
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


async def test_waiting_for_a_free_connection_is_bounded_by_the_pool_timeout() -> None:
    async with upstream() as (up, url), pooled(pool=0.3, connections=1) as c:
        up.events, up.gap = 1000, 0.01
        async with aclosing(opened(c, url + "/completion")) as held:
            await anext(held)  # the only connection is busy with this stream
            with pytest.raises(UpstreamTimeout) as caught:
                await events(c, url + "/completion")
    assert isinstance(caught.value.__cause__, httpx.ConnectTimeout)


async def test_an_error_status_maps_with_its_body_and_headers() -> None:
    async with upstream() as (_, url), pooled() as c:
        with pytest.raises(UpstreamRateLimited) as caught:
            await events(c, url + "/busy")
    assert caught.value.retry_after == 7.0 and "slow down" in caught.value.message


async def test_a_pooled_connection_the_server_dropped_is_sent_again_on_a_new_one() -> None:
    server = raw.DropsReused(raw.HEAD + raw.chunk(b'data: {"ok": true}\n\n') + b"0\r\n\r\n")
    async with raw.listening(server) as url, pooled() as c:
        for _ in range(5):
            assert await events(c, url) == [{"ok": True}]
    assert server.connections >= 5


async def test_a_new_connection_dropped_without_an_answer_is_not_sent_again() -> None:
    server = raw.DropsFirst()
    async with raw.listening(server) as url, pooled() as c:
        with pytest.raises(UpstreamError):
            await events(c, url)
    assert server.requests == 1


async def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw.HEAD + raw.chunk(b'data: {"via": 1}\n\n') + b"0\r\n\r\n")
        await writer.drain()

    async with raw.serving(answer) as (proxy, proxy_url), raw.serving(answer) as (direct, direct_url):
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with pooled() as c:
            assert await events(c, "http://upstream.invalid:8080/completion") == [{"via": 1}]
            assert await events(c, direct_url + "/completion") == [{"via": 1}]
    assert proxy.requests[0][0].startswith(b"POST http://upstream.invalid:8080/completion HTTP/1.1")
    assert direct.requests[0][0].startswith(b"POST /completion HTTP/1.1")  # NO_PROXY: direct


# The gateway as shipped (``create_app`` without an injected transport) on a loopback upstream.

def production(url: str, backend: str = "llamacpp") -> Any:
    return create_app(config(backend=backend, base_urls=[url]))


async def test_the_shipped_gateway_answers_on_the_thin_client_and_reuses_its_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_send = httpx.AsyncClient.send
    upstream_posts: list[str] = []

    async def send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> httpx.Response:
        if request.url.port == loopback.port and request.method == "POST":
            upstream_posts.append(str(request.url))  # an upstream POST through httpx
        return await real_send(self, request, **kw)

    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    loopback = LoopbackUpstream(mode="final", events=ANSWER, keep_alive=True)
    with loopback.running() as url:
        app = production(url)
        async with app.router.lifespan_context(app):
            backend = app.state.registry.routes[MODEL].backend
            assert isinstance(upstream_for(backend.client), AiohttpUpstream)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://gateway") as c:
                for stream in (False, True, False):
                    r = await c.post("/v1/chat/completions", json={**CHAT, "stream": stream})
                    assert r.status_code == 200, r.text
                    text = (r.json()["choices"][0]["message"]["content"] if not stream else
                            "".join(p["choices"][0]["delta"].get("content") or ""
                                    for p in sse_payloads(r.text)[:-1] if p.get("choices")))
                    assert text == "Hi"
    assert loopback.requests == 3 and upstream_posts == []
    assert loopback.connections <= 2  # discovery's GET may close its own; the POSTs share one


@pytest.mark.parametrize("backend", ["llamacpp", "openai", "ollama"])
async def test_a_client_disconnect_closes_the_upstream_of_the_shipped_gateway(backend: str) -> None:
    loopback = LoopbackUpstream(interval=0.01, dialect=backend)  # an endless answer
    with loopback.running() as url:
        app = production(url, backend)
        post = AsgiPost("/v1/chat/completions", CHAT, leave_after=5)
        async with app.router.lifespan_context(app):
            gone = await post.until_gone(app)
            await eventually(lambda: loopback.closed_at)
    assert loopback.requests == 1 and loopback.closed_at[0] - gone < 0.1
