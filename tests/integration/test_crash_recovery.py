"""kill -9 while responses are in flight: after a restart, a background response a client
already saw ``in_progress`` (and a streaming one) reads back ``failed`` (code ``run_lost``),
never 404, and finished ones are intact."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import run_gateway
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.postgres import postgres_server
from tests.support.process import crash
from tests.support.wire import load

pytestmark = pytest.mark.integration
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]


def test_kill_9_leaves_failed_responses_not_missing_ones(tmp_path: Path) -> None:
    endless, final = LoopbackUpstream(interval=0.02), LoopbackUpstream(mode="final", events=FINAL)
    with endless.running() as endless_url, final.running() as final_url:
        config = tmp_path / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp_path / "r.sqlite3"}"\nheartbeat_seconds = 0.2\n'
                          f'lost_after_seconds = 1.0\n'
                          f'[models.endless]\nbase_urls = ["{endless_url}"]\n'
                          f'[models.final]\nbase_urls = ["{final_url}"]\n')
        with run_gateway(config) as gw:
            done = httpx.post(f"{gw.url}/v1/responses", json={"model": "final", "input": "hi"}, timeout=30)
            assert done.json()["status"] == "completed"
            bg = httpx.post(f"{gw.url}/v1/responses", json={"model": "endless", "input": "hi",
                                                             "background": True}, timeout=30).json()
            with httpx.stream("POST", f"{gw.url}/v1/responses", timeout=30,
                              json={"model": "endless", "input": "hi", "stream": True}) as r:
                lines = r.iter_lines()
                streamed_id = None
                for line in lines:
                    if line.startswith("data: ") and '"response.created"' in line:
                        streamed_id = line.split('"id":"', 1)[1].split('"', 1)[0]
                        break
                for _ in range(50):
                    polled = httpx.get(f"{gw.url}/v1/responses/{bg['id']}", timeout=5).json()
                    if polled["status"] == "in_progress" and polled["output"]:
                        break
                    time.sleep(0.05)
                assert polled["status"] == "in_progress"
                crash(gw.process)  # the workers too: with N of them, serve alone is not a crash
        time.sleep(1.2)  # longer than lost_after_seconds
        with run_gateway(config) as gw:
            for rid in (bg["id"], streamed_id):
                r = httpx.get(f"{gw.url}/v1/responses/{rid}", timeout=5)
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["status"] == "failed" and body["error"]["code"] == "run_lost"
                assert all(item["status"] != "in_progress" for item in body["output"])
            again = httpx.get(f"{gw.url}/v1/responses/{done.json()['id']}", timeout=5).json()
            assert again == done.json()


def test_kill_9_of_one_replica_on_postgresql(tmp_path: Path) -> None:
    """Two replicas on one PostgreSQL: A is killed with -9 mid-run; B (still up, never
    restarted) reads A's background response back ``failed`` / ``run_lost`` once A's
    heartbeats stop, and A's finished response intact."""
    endless, final = LoopbackUpstream(interval=0.02), LoopbackUpstream(mode="final", events=FINAL)
    with postgres_server() as pg, endless.running() as endless_url, final.running() as final_url:
        def config(name: str) -> Path:
            path = tmp_path / f"{name}.toml"
            path.write_text(f'[store]\npath = "{tmp_path / name}.sqlite3"\nurl = "{pg}"\n'
                            f'heartbeat_seconds = 0.2\nlost_after_seconds = 1.0\n'
                            f'[models.endless]\nbase_urls = ["{endless_url}"]\n'
                            f'[models.final]\nbase_urls = ["{final_url}"]\n')
            return path

        with run_gateway(config("a")) as a, run_gateway(config("b")) as b:
            done = httpx.post(f"{a.url}/v1/responses", json={"model": "final", "input": "hi"}, timeout=30)
            bg = httpx.post(f"{a.url}/v1/responses", json={"model": "endless", "input": "hi",
                                                            "background": True}, timeout=30).json()
            for _ in range(100):
                seen = httpx.get(f"{b.url}/v1/responses/{bg['id']}", timeout=5).json()
                if seen["status"] == "in_progress":
                    break
                time.sleep(0.05)
            assert seen["status"] == "in_progress"  # B sees A's run in flight
            crash(a.process)  # the workers too: with N of them, serve alone is not a crash
            time.sleep(1.5)  # longer than lost_after_seconds
            r = httpx.get(f"{b.url}/v1/responses/{bg['id']}", timeout=5)
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "failed" and r.json()["error"]["code"] == "run_lost"
            assert httpx.get(f"{b.url}/v1/responses/{done.json()['id']}", timeout=5).json() == done.json()
