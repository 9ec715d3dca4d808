"""Slow clients cannot hold the gateway's connections (the real ``ocm-gateway serve``, with
each ``[http] protocol``): a request head must arrive within ``header_timeout``, a body within
``body_timeout`` (408), a connection that sends nothing is closed, and open connections are
capped."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support.gateway import MODEL
from tests.support.process import gateway_process

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("protocol", ["h11", "httptools"])]
UPSTREAM = "http://127.0.0.1:9"  # never reached: nothing here gets that far


async def _open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = httpx.URL(url).host, httpx.URL(url).port
    return await asyncio.open_connection(host, port)


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> tuple[float, bytes]:
    t0 = time.monotonic()
    try:
        data = await asyncio.wait_for(reader.read(), seconds)  # b"" or a response, then EOF
    except ConnectionResetError:  # closed while the client was still writing: the kernel sends RST
        data = b""
    return time.monotonic() - t0, data


async def test_silent_and_dribbling_connections_are_closed(protocol: str) -> None:
    with gateway_process(UPSTREAM, MODEL, limits__header_timeout=1, limits__body_timeout=1,
                         http__protocol=protocol) as gw:
        silent_reader, _ = await _open(gw)
        dribble_reader, dribble = await _open(gw)
        head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n"

        async def dribbling() -> None:
            for byte in head:
                if dribble.is_closing():
                    return
                dribble.write(bytes([byte]))
                await asyncio.sleep(0.2)

        task = asyncio.create_task(dribbling())
        elapsed, data = await _closed_within(silent_reader, 5)
        assert data == b"" and elapsed < 4  # the 1 s deadline, with room for a busy machine
        elapsed, data = await _closed_within(dribble_reader, 5)
        assert data == b"" and elapsed < 4  # the 1 s deadline, with room for a busy machine
        task.cancel()
        # A client that keeps its connection after a response gets the same deadline again.
        reader, writer = await _open(gw)
        writer.write(b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b'{"status":"ok"}'), 5)
        assert first.startswith(b"HTTP/1.1 200")
        elapsed, _ = await _closed_within(reader, 10)
        assert elapsed < 8  # uvicorn's keep-alive timeout (5 s) or the head deadline
        # The gateway still serves everyone else.
        async with httpx.AsyncClient(base_url=gw) as c:
            assert (await c.get("/health")).status_code == 200


async def test_a_body_shorter_than_its_content_length_is_a_408(protocol: str) -> None:
    with gateway_process(UPSTREAM, MODEL, limits__header_timeout=1, limits__body_timeout=1,
                         http__protocol=protocol) as gw:
        reader, writer = await _open(gw)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"model\":")
        t0 = time.monotonic()
        data = await asyncio.wait_for(reader.readuntil(b'"code":"request_timeout"'), 5)  # head + body
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert time.monotonic() - t0 < 4
        writer.close()


async def test_open_connections_are_capped(protocol: str) -> None:
    with gateway_process(UPSTREAM, MODEL, limits__max_connections=5, limits__header_timeout=30,
                         http__protocol=protocol) as gw:
        held = [await _open(gw) for _ in range(5)]  # five idle connections: the cap
        await asyncio.sleep(0.2)
        reader, writer = await _open(gw)
        data = await asyncio.wait_for(reader.read(), 5)
        assert data.startswith(b"HTTP/1.1 503") and b'"code":"too_many_connections"' in data
        assert b"retry-after: 1" in data
        writer.close()
        held.pop()[1].close()  # one leaves: room for a new client
        await asyncio.sleep(0.2)
        async with httpx.AsyncClient(base_url=gw) as c:
            assert (await c.get("/health")).status_code == 200
        for _, w in held:
            w.close()
