"""Hostile WebSocket sessions against the real process: memory is bounded while they are open
and returned once they close (app/http/memory.py, the pending-bytes cap in
app/api/responses/websocket.py).

Before: 16 queued messages of 14 MiB added 259 MiB of RSS per socket, and 820 MiB stayed after
the sockets closed.  Each socket here has a response streaming (slowly) and queues 16
messages of ~0.9 MB behind it; waiting messages may hold ``max_body_bytes`` (16 MiB) in all.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.integration.conftest import run_gateway
from tests.support.loopback_upstream import LoopbackUpstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SOCKETS = 6
MESSAGE = 900_000


def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def test_memory_is_bounded_while_open_and_returned_after_close(tmp_path: Path) -> None:
    upstream = LoopbackUpstream(interval=5.0)  # the first response streams slowly; the rest queue
    with upstream.running() as url:
        config = tmp_path / "gw.toml"
        config.write_text(f'[store]\npath = ":memory:"\n[models.endless]\nbase_urls = ["{url}"]\n')
        with run_gateway(config) as gw:
            ws_url = gw.url.replace("http://", "ws://") + "/v1/responses"
            time.sleep(1)
            baseline = _rss_mib(gw.process.pid)
            sockets = []
            for _ in range(SOCKETS):
                ws = connect(ws_url, max_size=None, ping_interval=None)
                ws.send(json.dumps({"type": "response.create", "model": "endless", "input": "go"}))
                for _ in range(16):
                    ws.send(json.dumps({"type": "response.create", "model": "endless",
                                        "input": "x" * MESSAGE}))
                sockets.append(ws)
            time.sleep(1.5)
            peak = _rss_mib(gw.process.pid)
            for ws in sockets:
                ws.close()
            time.sleep(3)  # the sessions end, then one trim
            after = _rss_mib(gw.process.pid)
    # Waiting messages hold at most 16 MiB a socket (the 17th message of each was refused).
    assert peak - baseline < SOCKETS * 16 * 2 + 64, (baseline, peak)
    # What they held is given back, not kept by the allocator (it was, before: 820 MiB).
    assert after - baseline < max(32, (peak - baseline) // 3), (baseline, peak, after)
