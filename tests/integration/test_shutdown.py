"""SIGTERM: in-flight streams get the grace period, then end with a proper terminal event."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import run_gateway
from tests.support.loopback_upstream import LoopbackUpstream

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, upstream_url: str) -> Path:
    """One endless model on ``upstream_url``, a 1 s shutdown grace period."""
    config = tmp_path / "gw.toml"
    config.write_text(f'shutdown_grace_seconds = 1.0\n[store]\npath = ":memory:"\n'
                      f'[models.endless]\nbase_urls = ["{upstream_url}"]\n')
    return config


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_sigterm_ends_streams_with_a_terminal_event(tmp_path: Path, api: str) -> None:
    upstream = LoopbackUpstream()
    with upstream.running() as upstream_url, run_gateway(_config(tmp_path, upstream_url)) as gw:
        url, proc = gw.url, gw.process
        path, body = (("/v1/chat/completions", {"model": "endless", "stream": True,
                                                "messages": [{"role": "user", "content": "hi"}]})
                      if api == "chat" else
                      ("/v1/responses", {"model": "endless", "stream": True, "input": "hi"}))
        lines: list[str] = []
        with httpx.stream("POST", url + path, json=body, timeout=30) as r:
            t_sigterm = None
            for line in r.iter_lines():
                lines.append(line)
                if t_sigterm is None and sum(x.startswith("data: ") for x in lines) >= 5:
                    proc.send_signal(signal.SIGTERM)
                    t_sigterm = time.monotonic()
            t_end = time.monotonic()
        assert t_sigterm is not None
        proc.wait(timeout=30)
    data = [x[6:] for x in lines if x.startswith("data: ")]
    assert data[-1] == "[DONE]"
    last = json.loads(data[-2])
    if api == "chat":
        assert last["error"]["code"] == "server_shutdown"
    else:  # the same terminal error as chat, in the Responses shape (not "cancelled": nobody cancelled)
        error = json.loads(data[-3])
        assert error["type"] == "error" and error["error"]["code"] == "server_shutdown"
        assert last["type"] == "response.failed" and last["response"]["status"] == "failed"
        assert last["response"]["error"]["code"] == "server_shutdown"
    assert 0.8 <= t_end - t_sigterm < 10  # streamed through the 1 s grace period, then ended
    assert upstream.closed_at, "the upstream generation was closed"


def test_sigterm_ends_a_websocket_response_with_a_terminal_event(tmp_path: Path) -> None:
    """The real process: the response streaming on a socket ends with error + response.failed
    (server_shutdown), then the socket closes with 1012 (app/http/ws_protocol.py)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    upstream = LoopbackUpstream()
    with upstream.running() as upstream_url, run_gateway(_config(tmp_path, upstream_url)) as gw:
        events: list[dict[str, object]] = []
        with connect(gw.url.replace("http://", "ws://") + "/v1/responses") as ws:
            ws.send(json.dumps({"type": "response.create", "model": "endless", "input": "hi"}))
            try:
                while True:
                    events.append(json.loads(ws.recv(timeout=15)))
                    if len(events) == 5:
                        gw.process.send_signal(signal.SIGTERM)
            except ConnectionClosed:
                pass
            code = ws.close_code
        gw.process.wait(timeout=30)
    types = [e["type"] for e in events]
    assert types[-1] == "response.failed" and types.count("response.failed") == 1, types[-3:]
    assert events[-1]["response"]["error"]["code"] == "server_shutdown"  # type: ignore[index]
    assert code == 1012 and upstream.closed_at, "the upstream generation was closed"
