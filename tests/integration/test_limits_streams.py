"""A streamed generation holds its key's concurrency slot under a real server (``ocm-gateway
serve``, both ``[http] protocol`` values) until its stream ends: while it streams, a second
generation of a ``max_concurrent = 1`` key is a 429, and once its client leaves the key is
admitted again.  Every path that generates: Chat, Responses (foreground and background+stream),
Messages, and a Responses WebSocket turn.  The first request is checked to be really streaming
(events from an upstream that never ends), so a stream that failed at once cannot pass for one
that released its slot early.  A stream read to its end is charged its tokens (a 40 tokens a
minute key is over its budget after one).  The server runs this tree's code (``python -m``
from the repo root), so a clean export of HEAD can be tested as it is."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import Running, free_port, healthy_process
from tests.support.wire import load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
KEY = "sk-one"
HEADERS = {"authorization": f"Bearer {KEY}"}
STREAMS = {
    "chat": ("/v1/chat/completions", {"model": "endless", "stream": True,
                                      "messages": [{"role": "user", "content": "go"}]}),
    "responses": ("/v1/responses", {"model": "endless", "input": "go", "stream": True}),
    "responses-unstored": ("/v1/responses", {"model": "endless", "input": "go", "stream": True,
                                             "store": False}),
    "responses-background": ("/v1/responses", {"model": "endless", "input": "go", "stream": True,
                                               "background": True}),
    "messages": ("/v1/messages", {"model": "endless", "max_tokens": 2000, "stream": True,
                                  "messages": [{"role": "user", "content": "go"}]}),
}

TOKEN_PATHS = ("chat", "responses", "messages")
TPM = 40  # the endless upstream streams 50 tokens a second


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@pytest.fixture(scope="module", params=["httptools", "h11"])
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("limits-streams")
    endless, final = LoopbackUpstream(interval=0.02), LoopbackUpstream(mode="final", events=FINAL)
    with endless.running() as endless_url, final.running() as final_url:
        digest = sha(KEY)
        tpm = "".join(f'[[auth.keys]]\nname = "{kind}-{n}"\nsha256 = "{sha(f"sk-{kind}-{n}")}"\n'
                      f'tokens_per_minute = {TPM}\n' for n in TOKEN_PATHS for kind in ("tpm", "left"))
        config = tmp / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n[http]\nprotocol = "{request.param}"\n'
                          f'[[auth.keys]]\nname = "one"\nsha256 = "{digest}"\nmax_concurrent = 1\n{tpm}'
                          f'[models.endless]\nbase_urls = ["{endless_url}"]\n'
                          f'[models.final]\nbase_urls = ["{final_url}"]\n')
        port = free_port()  # ``-m`` from the repo root: this tree's code, whatever the venv installed
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OCMGW", "OTEL_"))}
        cmd = [sys.executable, "-m", "app.cli.main", "serve", "--config", str(config), "--host",
               "127.0.0.1", "--port", str(port), "--workers", "1", "--log-level", "warning"]
        with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=120, env=env) as running:
            yield running


def second(gw: Running) -> int:
    """Another generation of the same key (non-streamed, on a model that answers at once)."""
    r = httpx.post(f"{gw.url}/v1/responses", headers=HEADERS, timeout=10,
                   json={"model": "final", "input": "hi", "store": False})
    if r.status_code == 429:
        assert r.json()["error"]["code"] == "concurrency_limit_exceeded", r.text
    return r.status_code


def admitted_again(gw: Running, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if second(gw) == 200:
            return True
        time.sleep(0.05)
    return False


def open_stream(gw: Running, path: str, body: dict[str, object], key: str = KEY,
                ) -> tuple[socket.socket, bytes]:
    """The request sent on a raw socket, and what it streamed once at least 3 events came."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1])), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                 f"authorization: Bearer {key}\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data)
    got = b""
    while got.count(b"\n\n") < 4:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    return sock, got


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_stream_holds_its_slot_until_it_ends(gateway: Running, name: str) -> None:
    path, body = STREAMS[name]
    assert admitted_again(gateway)  # nothing held from an earlier test
    sock, got = open_stream(gateway, path, body)
    try:
        assert got.startswith(b"HTTP/1.1 200"), got[:300]
        events = got.split(b"\r\n\r\n", 1)[1]
        assert b"text/event-stream" in got and b'"type":"error"' not in events, got[:600]
        assert b"response.failed" not in events, got[:600]
        time.sleep(0.3)  # well into the stream
        assert second(gateway) == 429
        assert sock.recv(65536)  # still streaming: more events keep coming
        assert second(gateway) == 429
    finally:
        sock.close()
    if name == "responses-background":  # leaving does not end a background run: cancel it
        rid = json.loads(got.split(b"data: ", 1)[1].split(b"\n", 1)[0])["response"]["id"]
        r = httpx.post(f"{gateway.url}/v1/responses/{rid}/cancel", headers=HEADERS, timeout=10)
        assert r.status_code == 200, r.text
    assert admitted_again(gateway), "the slot was not given back once the stream ended"


def test_a_websocket_turn_holds_its_slot_until_it_ends(gateway: Running) -> None:
    assert admitted_again(gateway)
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers=HEADERS, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "endless", "input": "go",
                            "store": False}))
        deltas = 0
        while deltas < 3:
            event = json.loads(ws.recv(timeout=10))
            assert event["type"] != "error", event
            deltas += event["type"] == "response.output_text.delta"
        assert second(gateway) == 429
    assert admitted_again(gateway), "the slot was not given back once the socket closed"



def read_to_end(gw: Running, path: str, body: dict[str, object], key: str) -> bytes:
    with httpx.stream("POST", f"{gw.url}{path}", json=body, timeout=10,
                      headers={"authorization": f"Bearer {key}"}) as r:
        assert r.status_code == 200
        return r.read()


@pytest.mark.parametrize("name", TOKEN_PATHS)
def test_a_streams_tokens_are_charged_when_it_ends(gateway: Running, name: str) -> None:
    """A whole stream (~70 tokens: prompt and answer) is charged when it ends: the key's next
    generation is over its 40 tokens a minute (charged with 0 tokens, it would be admitted)."""
    path, body = STREAMS[name]
    key = f"sk-tpm-{name}"
    events = read_to_end(gateway, path, {**body, "model": "final"}, key)
    assert b"Hello" in events, events[-400:]  # the recorded answer, streamed to its end
    r = httpx.post(f"{gateway.url}/v1/responses", headers={"authorization": f"Bearer {key}"},
                   timeout=10, json={"model": "final", "input": "hi", "store": False})
    assert r.status_code == 429, r.text
    assert "tokens per minute" in r.json()["error"]["message"]


@pytest.mark.parametrize("name", TOKEN_PATHS)
def test_a_stream_its_client_leaves_is_charged_what_it_cost(gateway: Running, name: str) -> None:
    """A stream the client leaves after ~1 s (~50 tokens, before the backend's usage) is charged
    its prompt and the tokens produced so far: the key's next generation is over its 40 tokens a
    minute (charged with 0 tokens, as before, it was admitted)."""
    path, body = STREAMS[name]
    key = f"sk-left-{name}"
    sock, got = open_stream(gateway, path, body, key)
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    time.sleep(1.0)
    sock.close()
    time.sleep(0.5)  # the gateway sees the disconnect and ends the run
    r = httpx.post(f"{gateway.url}/v1/responses", headers={"authorization": f"Bearer {key}"},
                   timeout=10, json={"model": "final", "input": "hi", "store": False})
    assert r.status_code == 429, r.text
    assert "tokens per minute" in r.json()["error"]["message"]
