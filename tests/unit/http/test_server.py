"""The HTTP/1.1 connection layer (``app.http.server``) on real sockets, for both protocols
(h11 and httptools): the same guards, the same answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import time

import httpx
import pytest
import uvicorn
from uvicorn.server import ServerState
from websockets.asyncio.client import connect

from app.http import server as http_server
from app.http.server import MAX_HEAD, PROTOCOLS, Protocol, protocol_class
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.ws import create, served, turn

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
BOTH = pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
TEXT = "<|channel|>final<|message|>Hello from a scripted tiny model!<|return|>"


async def _app(scope: object, receive: object, send: object) -> None:  # never called
    raise AssertionError


async def _exchange(host: str, data: bytes | list[bytes], seconds: float = 5.0) -> bytes:
    """Send ``data`` (a list: one write each, 10 ms apart, until an answer arrives), read until
    the server closes; what arrived before a reset counts."""
    address, port = host.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(address, int(port))
    received: list[bytes] = []

    async def read() -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                received.append(chunk)

    reading = asyncio.create_task(read())
    try:
        for piece in [data] if isinstance(data, bytes) else data:
            if writer.is_closing() or received or reading.done():
                break
            writer.write(piece)
            await asyncio.sleep(0.01 if isinstance(data, list) else 0)
        await asyncio.wait_for(reading, seconds)
        return b"".join(received)
    finally:
        reading.cancel()
        writer.close()


def _error(response: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    assert b"connection: close" in head.lower()
    return int(head.split()[1]), json.loads(body)["error"]


@BOTH
@pytest.mark.parametrize("proto", [0, socket.IPPROTO_TCP])
async def test_accepted_connections_send_small_writes_at_once(protocol: Protocol, proto: int) -> None:
    """``--workers N``: uvicorn binds the listening socket itself with protocol 0, and asyncio
    then leaves Nagle on for accepted connections; the gateway turns it off on every one."""
    cls = protocol_class(protocol)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    config_ = uvicorn.Config(_app, http=cls, log_level="error")
    config_.load()
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: cls(config=config_, server_state=state, app_state={}),  # type: ignore[call-arg]
        sock=listener)
    try:
        _, writer = await asyncio.open_connection(*listener.getsockname())
        for _ in range(100):
            if state.connections:
                break
            await asyncio.sleep(0.01)
        (connection,) = state.connections
        assert isinstance(connection, cls)
        accepted = connection.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        writer.close()
    finally:
        server.close()


HUGE = b"x-big: " + b"a" * (MAX_HEAD + 1000) + b"\r\n"
MANY = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 60) for i in range(MAX_HEAD // 60))


@BOTH
@pytest.mark.parametrize("shape", ["one write", "dribbled", "many headers", "long url", "no end"])
async def test_a_head_over_the_limit_is_a_431_and_a_close(protocol: Protocol, shape: str) -> None:
    start = b"GET /health HTTP/1.1\r\nhost: gw\r\n"
    shapes: dict[str, bytes | list[bytes]] = {
        "one write": start + HUGE + b"\r\n",
        "dribbled": [start] + [HUGE[i:i + 4096] for i in range(0, len(HUGE), 4096)] + [b"\r\n"],
        "many headers": start + MANY + b"\r\n",
        "long url": b"GET /health?" + b"q" * (MAX_HEAD + 10) + b" HTTP/1.1\r\nhost: gw\r\n\r\n",
        "no end": start + HUGE,  # the head never ends: refused before the head deadline
    }
    data = shapes[shape]
    async with served(FakeLlamaCpp(TEXT).transport(), protocol=protocol) as host:
        t0 = time.monotonic()
        response = await _exchange(host, data)
        assert time.monotonic() - t0 < 4  # not the 10 s head deadline
        status, error = _error(response)
        assert (status, error["code"]) == (431, "request_header_too_large")
        async with httpx.AsyncClient(base_url=f"http://{host}") as c:  # everyone else is served
            assert (await c.get("/health")).status_code == 200


@BOTH
async def test_a_large_head_under_the_limit_is_served(protocol: Protocol) -> None:
    headers = {f"x-h{i}": "v" * 100 for i in range((MAX_HEAD - 2048) // 110)}
    async with served(FakeLlamaCpp(TEXT).transport(), protocol=protocol) as host, \
            httpx.AsyncClient(base_url=f"http://{host}") as c:
        assert sum(len(k) + len(v) + 4 for k, v in headers.items()) > MAX_HEAD - 4096
        assert (await c.get("/health", headers=headers)).status_code == 200


@BOTH
@pytest.mark.parametrize("head", [
    b"GET /health HTTP/1.1\r\nhost: gw\r\nbad header\r\n\r\n",
    b"GET /health HTTP/1.1\r\nhost: gw\r\nx: \x00\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS client hello
    b"GET /he alth HTTP/1.1\r\nhost: gw\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
])
async def test_a_malformed_head_is_a_400_in_the_error_envelope(protocol: Protocol, head: bytes) -> None:
    async with served(FakeLlamaCpp(TEXT).transport(), protocol=protocol) as host:
        status, error = _error(await _exchange(host, head))
        assert status == 400 and error["type"] == "invalid_request_error"


@BOTH
async def test_pipelined_requests_are_answered_in_order(protocol: Protocol) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    chat = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))
    data = (b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n" + chat + b"GET /v1/models HTTP/1.1\r\n"
            b"host: gw\r\n\r\nGET /nowhere HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")
    async with served(FakeLlamaCpp(TEXT).transport(), protocol=protocol) as host:
        response = await _exchange(host, data)
    statuses = [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", response)]
    assert statuses == [200, 200, 200, 404]
    marks = [b'"status":"ok"', b"Hello from a scripted tiny model!", b'"object":"list"', b"HTTP/1.1 404"]
    at = [response.index(mark) for mark in marks]
    assert at == sorted(at)


@BOTH
async def test_an_idle_websocket_outlives_the_head_deadline(protocol: Protocol,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "_settings", lambda: (0.2, 1000))
    async with served(FakeLlamaCpp(TEXT).transport(), protocol=protocol) as host:
        silent = await _exchange(host, b"", seconds=3)  # the deadline is armed for HTTP
        assert silent == b""
        async with connect(f"ws://{host}/v1/responses") as ws:
            await asyncio.sleep(0.6)
            await ws.send(create(input="Still there?"))
            events, error = await turn(ws)
    assert error is None and events[-1]["type"] == "response.completed"


@BOTH
async def test_connections_over_the_cap_get_a_503(protocol: Protocol,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "_settings", lambda: (30.0, 2))
    async with served(FakeLlamaCpp(TEXT).transport(), protocol=protocol) as host:
        address, port = host.rsplit(":", 1)
        held = [await asyncio.open_connection(address, int(port)) for _ in range(2)]
        await asyncio.sleep(0.1)
        status, error = _error(await _exchange(host, b""))
        assert (status, error["code"]) == (503, "too_many_connections")
        held.pop()[1].close()
        await asyncio.sleep(0.1)
        response = await _exchange(host, b"GET /health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")
        assert response.startswith(b"HTTP/1.1 200")
        for _, writer in held:
            writer.close()


@BOTH
async def test_a_client_that_leaves_closes_the_upstream_request(protocol: Protocol) -> None:
    upstream = LoopbackUpstream(interval=0.01)
    with upstream.running() as url:
        data = config().model_dump()
        data["models"][MODEL]["base_urls"] = [url]
        cfg = type(config()).model_validate(data)
        async with served(httpx.AsyncHTTPTransport(), cfg, protocol=protocol) as host:
            body = json.dumps({"model": MODEL, "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]}).encode()
            address, port = host.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(address, int(port))
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: "
                         b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            received = b""
            while received.count(b"data: ") < 5:
                received += await asyncio.wait_for(reader.read(4096), 5)
            assert received.startswith(b"HTTP/1.1 200")
            writer.transport.abort()
            gone = time.monotonic()
            while not upstream.closed_at and time.monotonic() - gone < 5:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # the upstream's record, in its own thread
    assert upstream.requests == 1
    assert upstream.closed_at and upstream.closed_at[0] - gone < 0.5


@BOTH
async def test_serve_runs_uvicorn_with_the_configured_protocol(protocol: Protocol,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli import limits_service, supervisor
    from app.cli.main import main

    seen: dict[str, object] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: seen.update(kwargs))
    monkeypatch.setattr(supervisor, "run", lambda *args, **kwargs: seen.update(kwargs))
    monkeypatch.setattr(limits_service, "start", lambda n, cfg: None)
    for name in [name for name in os.environ if name.startswith("OCMGW")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OCMGW_SERVE_SEAL_KEY", "")  # what serve sets is undone after the test
    monkeypatch.setenv("OCMGW_MODEL", MODEL)
    monkeypatch.setenv("OCMGW_BACKEND_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OCMGW__http__protocol", protocol)
    for workers in ("1", "2"):  # one process, or the default's N workers under the supervisor
        seen.clear()
        assert main(["serve", "--workers", workers]) == 0
        assert seen["http"] is PROTOCOLS[protocol] and seen["workers"] == int(workers)
        assert seen["h11_max_incomplete_event_size"] == MAX_HEAD


async def test_a_response_head_goes_out_with_its_body_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """httptools: one ``send`` for a JSON answer's head and body, and for a stream's head and its
    first events when they are ready (each write is a syscall and a wake-up of the client)."""
    writes: list[bytes] = []
    real = asyncio.selector_events._SelectorSocketTransport.write  # type: ignore[attr-defined]

    def write(self: asyncio.Transport, data: bytes) -> None:
        writes.append(bytes(data))
        real(self, data)

    monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport,  # type: ignore[attr-defined]
                        "write", write)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with served(FakeLlamaCpp(TEXT).transport(), protocol="httptools") as host, \
            httpx.AsyncClient(base_url=f"http://{host}") as c:
        for stream in (False, True):
            writes.clear()
            r = await c.post("/v1/chat/completions", json=chat | {"stream": stream})
            assert r.status_code == 200 and "Hello" in r.text
            (head,) = [w for w in writes if w.startswith(b"HTTP/1.1 ")]
            assert (b"data: " if stream else b'"choices"') in head, head[:400]
        writes.clear()
        assert (await c.get("/health")).status_code == 200
        (head,) = [w for w in writes if w.startswith(b"HTTP/1.1 ")]
        assert head.endswith(b"}"), head


async def test_a_held_head_goes_out_at_the_end_of_the_turn_or_with_a_close() -> None:
    class Wire:
        def __init__(self) -> None:
            self.out: list[bytes] = []
            self.closed = False

        def write(self, data: bytes) -> None:
            self.out.append(data)

        def close(self) -> None:
            self.closed = True

        def is_closing(self) -> bool:
            return self.closed

    loop = asyncio.get_running_loop()
    wire = Wire()
    hold = http_server._HeadWithBody(wire, loop)  # type: ignore[arg-type]
    hold.write(b"head")
    assert wire.out == []
    await asyncio.sleep(0)  # a stream whose first event is not ready: the head alone, this turn
    assert wire.out == [b"head"]
    hold.write(b"later")
    assert wire.out == [b"head", b"later"]
    wire = Wire()
    hold = http_server._HeadWithBody(wire, loop)  # type: ignore[arg-type]
    hold.write(b"head")
    hold.write(b"body")
    hold.write(b"more")
    assert wire.out == [b"headbody", b"more"]
    wire = Wire()
    hold = http_server._HeadWithBody(wire, loop)  # type: ignore[arg-type]
    hold.write(b"head")
    hold.close()  # flushed before the close
    assert wire.out == [b"head"] and wire.closed and hold.is_closing()
    await asyncio.sleep(0)
    assert wire.out == [b"head"]  # the turn's flush has nothing left
