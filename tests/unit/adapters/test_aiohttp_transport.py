"""The aiohttp transport under httpx, against a real socket: streaming, timeouts, closing, errors.

The servers are raw asyncio (:mod:`tests.support.raw_http`) so each test controls the bytes and
the timing exactly (a chunked SSE body like llama.cpp's, a stall, a cut, keep-alive).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
import trustme

from adapters.aiohttp_transport import AiohttpTransport
from tests.support.raw_http import (
    HEAD,
    DropsFirst,
    DropsReused,
    chunk,
    cut_after,
    listening,
    nobody_listening,
    read_request,
    serving,
    stalls_after,
)

pytestmark = pytest.mark.asyncio

def client(read: float = 5.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=10)
    return httpx.AsyncClient(transport=AiohttpTransport(limits),
                             timeout=httpx.Timeout(connect=2.0, read=read, write=2.0, pool=2.0))


async def test_body_bytes_arrive_as_they_are_sent_and_the_request_is_intact() -> None:
    second = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        await second.wait()  # the client must see event 1 before event 2 exists
        writer.write(chunk(b"data: 2\n\n") + b"0\r\n\r\n")
        await writer.drain()

    got = []
    async with serving(handler) as (server, url), client() as c, c.stream(
            "POST", url + "/completion", content=b'{"prompt":[1,2]}',
            headers={"content-type": "application/json"}) as r:
        async for data in r.aiter_raw():
            got.append(data)
            second.set()
    assert b"".join(got) == b"data: 1\n\ndata: 2\n\n" and got[0] == b"data: 1\n\n"
    head, body = server.requests[0]
    assert body == b'{"prompt":[1,2]}' and b"content-type: application/json" in head.lower()
    assert head.startswith(b"POST /completion HTTP/1.1") and b"accept-encoding: identity" in head.lower()


async def test_a_body_read_to_the_end_leaves_its_connection_for_the_next_request() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(b"data: x\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with serving(handler) as (server, url), client() as c:
        for _ in range(5):
            async with c.stream("POST", url, content=b"{}") as r:
                assert await r.aread() == b"data: x\n\n"
    assert server.connections == 1 and len(server.requests) == 5


async def test_a_body_cut_short_closes_its_connection_so_the_upstream_stops() -> None:
    lost = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        try:
            for _ in range(1000):  # an endless generation, one token every 10 ms
                writer.write(chunk(b"data: token\n\n"))
                await writer.drain()
                await asyncio.sleep(0.01)
        except ConnectionError:
            lost.set()  # what makes llama.cpp cancel the generation

    async with serving(handler) as (_, url), client() as c:
        async with c.stream("POST", url, content=b"{}") as r:
            async for _ in r.aiter_raw():
                break  # the client went away after the first event
        await asyncio.wait_for(lost.wait(), 2.0)


async def test_silence_mid_body_is_a_read_timeout() -> None:
    async with serving(stalls_after(b"data: 1\n\n")) as (_, url), client(read=0.3) as c:
        with pytest.raises(httpx.ReadTimeout):
            async with c.stream("POST", url, content=b"{}") as r:
                async for _ in r.aiter_raw():
                    pass


async def test_a_connection_lost_mid_body_is_a_read_error() -> None:
    async with serving(cut_after(b"data: 1\n\n")) as (_, url), client() as c:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            async with c.stream("POST", url, content=b"{}") as r:
                async for _ in r.aiter_raw():
                    pass


async def test_nobody_listening_is_a_connect_error() -> None:
    url = await nobody_listening()
    async with client() as c:
        with pytest.raises(httpx.ConnectError):
            await c.post(f"{url}/completion", content=b"{}")


async def test_a_status_and_json_body_come_through_like_httpx() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = b'{"error":{"message":"busy","type":"unavailable_error"}}'
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                     b"retry-after: 3\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    async with serving(handler) as (_, url), client() as c:
        r = await c.get(url + "/health")
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["message"] == "busy"


async def test_a_kept_alive_connection_the_server_dropped_is_not_a_failed_request() -> None:
    # One answer per connection, then the next request on it is dropped unanswered: a server
    # whose keep-alive timeout fired just as the gateway reused the connection.
    server = DropsReused(HEAD + chunk(b"data: ok\n\n") + b"0\r\n\r\n")
    async with listening(server) as url, client() as c:
        for _ in range(5):
            async with c.stream("POST", url, content=b"{}") as r:
                assert await r.aread() == b"data: ok\n\n"
    assert server.connections >= 5


async def test_a_new_connection_dropped_without_an_answer_is_not_sent_again() -> None:
    server = DropsFirst()  # the server died on this request
    async with listening(server) as url, client() as c:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await c.post(url, content=b"{}")
    assert server.requests == 1


async def test_https_upstreams_are_verified_like_httpx_would(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async with listening(serve, ssl=server_ctx) as url:
        async with client() as c:  # an unknown CA: refused, not silently trusted
            with pytest.raises(httpx.ConnectError):
                await c.get(url + "/health")
        bundle = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # the operator's CA, as httpx honours it
        async with client() as c:
            assert (await c.get(url + "/health")).text == "ok"


async def test_proxies_come_from_the_environment_once_per_origin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``HTTP_PROXY`` / ``NO_PROXY`` are honoured as httpx's ``trust_env`` does, and read once
    per upstream origin, not on every request (aiohttp's own ``trust_env`` does two thread
    hops per request for them)."""
    from aiohttp.helpers import get_env_proxy_for_url as real

    lookups: list[str] = []

    def counted(url: object) -> object:
        lookups.append(str(url))
        return real(url)  # type: ignore[arg-type]

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()

    monkeypatch.setattr("adapters.aiohttp_transport.get_env_proxy_for_url", counted)
    async with serving(proxy) as (server, proxy_url), serving(proxy) as (direct, direct_url):
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with client() as c:
            for _ in range(3):
                assert (await c.post("http://upstream.invalid:8080/completion", content=b"{}")
                        ).text == "ok"
            assert (await c.post(direct_url + "/v1/models", content=b"{}")).text == "ok"
    heads = [head for head, _ in server.requests]
    assert len(heads) == 3
    assert all(h.startswith(b"POST http://upstream.invalid:8080/completion HTTP/1.1") for h in heads)
    assert direct.requests[0][0].startswith(b"POST /v1/models HTTP/1.1")  # NO_PROXY: direct
    assert lookups == ["http://upstream.invalid:8080/completion", direct_url + "/v1/models"]


async def test_reuse_is_known_without_aiohttp_tracing() -> None:
    """Whether a request got a pooled connection comes from the pool's connector, not from
    aiohttp's tracing (a ``Trace`` and its awaited signals on every request): the session has
    no trace configs, and a second request on a kept-alive connection is seen as reused."""
    from adapters import aiohttp_transport as at

    seen: list[bool] = []
    real = at._Connector._get

    async def recording(self: at._Connector, key: object, traces: list[object]) -> object:
        conn = await real(self, key, traces)  # type: ignore[arg-type]
        attempt = at._ATTEMPT.get()
        seen.append(attempt is not None and attempt.reused)
        return conn

    server = DropsReused(HEAD + chunk(b"data: ok\n\n") + b"0\r\n\r\n")
    transport = AiohttpTransport(httpx.Limits(max_connections=4))
    async with listening(server) as url, httpx.AsyncClient(transport=transport) as c:
        at._Connector._get = recording  # type: ignore[method-assign]
        try:
            for _ in range(2):
                async with c.stream("POST", url, content=b"{}") as r:
                    assert await r.aread() == b"data: ok\n\n"
        finally:
            at._Connector._get = real  # type: ignore[method-assign]
        assert transport.pool._client().trace_configs == []
    assert seen[0] is False and True in seen  # the first on a new connection, a later one reused
