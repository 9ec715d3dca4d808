"""The test TCP proxies (tests/support/rr_proxy.py, tests/support/recording_proxy.py) on one
splice: answers pass through untouched, the recording keeps what each client sent, the
round-robin proxy hands connections to its backends in turn, and a backend that refuses
closes the client's connection."""

from __future__ import annotations

import asyncio
import gzip

import httpx
import pytest

from tests.support.raw_http import listening, nobody_listening, serving
from tests.support.recording_proxy import parse_requests, recording_proxy
from tests.support.rr_proxy import round_robin


async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok")
    await writer.drain()


def test_requests_are_parsed_with_length_chunked_and_gzip_bodies() -> None:
    packed = gzip.compress(b'{"z": 1}')
    data = (b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
            b"POST /chunked HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2;ext\r\nde\r\n0\r\n\r\n"
            b"POST /gz HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
            b"GET /health HTTP/1.1\r\n\r\n"
            b"POST /cut HTTP/1.1\r\nContent-Length: 10\r\n\r\nonly5" % (len(packed), packed))
    got = parse_requests(data)
    assert [(r.method, r.path, r.body) for r in got] == [
        ("POST", "/v1/messages?beta=true", b'{"a":1}'), ("POST", "/chunked", b"abcde"),
        ("POST", "/gz", b'{"z": 1}'), ("GET", "/health", b"")]  # the cut one is left out
    assert got[0].headers["host"] == "x" and got[0].json() == {"a": 1}
    assert parse_requests(b"POST /c HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nab") == []


async def test_the_recording_proxy_passes_answers_through_and_keeps_what_was_sent() -> None:
    async with serving(ok) as (upstream, url):
        with recording_proxy(url) as recording:
            async with httpx.AsyncClient(base_url=recording.url) as c:
                answers = [await c.post("/one", content=b"first"), await c.post("/two", json={"n": 2})]
            async with httpx.AsyncClient(base_url=recording.url) as other:  # a second connection
                answers.append(await other.get("/three"))
            await asyncio.sleep(0.05)  # the proxy's copy is made as the bytes pass
            seen = recording.requests()
    assert [(r.status_code, r.text) for r in answers] == [(200, "ok")] * 3
    assert [(r.method, r.path, r.body) for r in seen] == [
        ("POST", "/one", b"first"), ("POST", "/two", b'{"n":2}'), ("GET", "/three", b"")]
    assert [body for _, body in upstream.requests] == [b"first", b'{"n":2}', b""]
    assert upstream.connections == 2


async def test_round_robin_hands_each_connection_to_the_next_backend() -> None:
    async with serving(ok) as (a, a_url), serving(ok) as (b, b_url):
        backends = [("127.0.0.1", int(u.rsplit(":", 1)[1])) for u in (a_url, b_url)]
        async with round_robin(backends) as lb:
            for _ in range(4):
                async with httpx.AsyncClient() as c:  # a new connection each time
                    assert (await c.get(lb + "/x")).text == "ok"
    assert (a.connections, b.connections) == (2, 2)


async def test_a_refused_backend_closes_the_clients_connection() -> None:
    dead = await nobody_listening()
    async with round_robin([("127.0.0.1", int(dead.rsplit(":", 1)[1]))]) as lb, httpx.AsyncClient() as c:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await c.get(lb + "/x")


async def test_a_client_that_leaves_closes_the_upstream_connection() -> None:
    closed = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the proxy closes its side
        closed.set()

    async with listening(hold) as url:
        port = int(url.rsplit(":", 1)[1])
        async with round_robin([("127.0.0.1", port)]) as lb:
            _, writer = await asyncio.open_connection("127.0.0.1", int(lb.rsplit(":", 1)[1]))
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            await writer.drain()
            writer.close()
            await asyncio.wait_for(closed.wait(), 2)
