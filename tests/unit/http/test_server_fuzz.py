"""Random request heads against a live gateway, for each HTTP protocol (h11 and httptools):
never a 5xx and never a hang. Every head is answered (a status line) or its connection is
closed within a bound: the head deadline and the body deadline are 0.5 s here."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.http import server as http_server
from app.http.server import PROTOCOLS, Protocol
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config
from tests.support.ws import served

pytestmark = pytest.mark.timeout(600)
TEXT = "<|channel|>final<|message|>Hi<|return|>"
DEADLINE = 0.5  # head and body deadlines of the server
BOUND = 5.0  # an answer or a close within this (the deadlines, with room for a busy machine)
STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


@pytest.fixture(scope="module", params=sorted(PROTOCOLS))
def live(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """The gateway on a loopback port, served by its own event loop in a thread."""
    protocol: Protocol = request.param
    patch = pytest.MonkeyPatch()
    patch.setattr(http_server, "_settings", lambda: (DEADLINE, 10_000))
    cfg = config()
    cfg.limits.body_timeout = DEADLINE
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    address: list[str] = []

    async def serve() -> None:
        async with served(FakeLlamaCpp(TEXT).transport(), cfg, protocol=protocol) as host:
            address.append(host)
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        assert ready.wait(30), "the gateway did not start"
        host, port = address[0].rsplit(":", 1)
        yield host, int(port)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
        patch.undo()


def _first_answer(where: tuple[str, int], data: bytes) -> tuple[bytes, float]:
    """Send ``data``; read until a response head is complete or the server closes. Returns what
    arrived and the seconds it took."""
    t0 = time.monotonic()
    received = b""
    with socket.create_connection(where, timeout=BOUND) as sock:
        try:
            sock.sendall(data)
            while b"\r\n\r\n" not in received:
                sock.settimeout(max(0.01, BOUND - (time.monotonic() - t0)))
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed by the server while the client was still writing
        except TimeoutError:
            raise AssertionError(f"no answer and no close within {BOUND} s: {data[:300]!r}") from None
    return received, time.monotonic() - t0


CHAT = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
METHODS = st.sampled_from([b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PATCH",
                           b"CONNECT", b"TRACE", b"PRI", b"get"]) | st.binary(max_size=8)
PATHS = st.sampled_from([b"/health", b"/v1/chat/completions", b"/v1/responses", b"/v1/models",
                         b"*", b"http://gw/health", b"/%zz", b"/v1/../health", b"/v1/responses?x=%00",
                         b"//", b"/\xff"]) | st.binary(max_size=40)
VERSIONS = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/0.9", b"http/1.1",
                            b"HTTP/1.1 x", b""]) | st.binary(max_size=10)
NAMES = st.sampled_from([b"host", b"content-length", b"transfer-encoding", b"connection",
                         b"upgrade", b"expect", b"content-type", b"authorization", b"Host",
                         b"sec-websocket-key", b"sec-websocket-version", b"x a", b""]) \
    | st.binary(max_size=20)
VALUES = st.sampled_from([b"0", b"5", b"-1", b"99999999999999999999", b"chunked", b"gzip, chunked",
                          b"close", b"keep-alive", b"upgrade", b"Upgrade", b"websocket", b"100-continue",
                          b"application/json", b"Bearer x", b"13", b"dGhlIHNhbXBsZSBub25jZQ==",
                          b"1, 2", b"\x00", b" "]) | st.binary(max_size=40)
ENDS = st.sampled_from([b"\r\n", b"\n", b"\r", b"\r\r\n"])
BODIES = st.sampled_from([b"", CHAT, b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"{", b"zz\r\n"]) \
    | st.binary(max_size=64)


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    end = draw(ENDS)
    line = draw(METHODS) + b" " + draw(PATHS) + b" " + draw(VERSIONS)
    headers = draw(st.lists(st.tuples(NAMES, VALUES), max_size=6))
    fields = b"".join(name + draw(st.sampled_from([b": ", b":", b" : "])) + value + draw(ENDS)
                      for name, value in headers)
    return line + end + fields + draw(st.sampled_from([end, b"\r\n", b""])) + draw(BODIES)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(head=heads())
def test_a_random_head_is_answered_below_500_or_closed_in_time(live: tuple[str, int], head: bytes) -> None:
    answer, took = _first_answer(live, head)
    assert took < BOUND
    status = STATUS.match(answer)
    assert answer == b"" or status is not None, answer[:200]
    assert status is None or int(status.group(1)) < 500, (head[:300], answer[:500])


def test_the_server_still_serves_after_the_fuzz(live: tuple[str, int]) -> None:
    answer, _ = _first_answer(live, b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")
