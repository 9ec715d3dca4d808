"""The Batch API through the OpenAI SDK against ``ocm-gateway serve`` processes, on an upstream
replaying a recorded llama.cpp answer (``tests/fixtures/wire`` 03a, paced so a batch takes a few
seconds): kill -9 halfway and restart → every ``custom_id`` exactly once in the output; two
replicas on one PostgreSQL share a batch, and when the one that took it is killed the other
finishes it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.integration.conftest import run_gateway
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.postgres import postgres_server
from tests.support.process import crash
from tests.support.wire import load

pytestmark = pytest.mark.integration
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
LINES = 1000  # the "done when": 1,000 chat requests, the gateway killed halfway


def config(path: Path, upstream: str, store: Path, url: str | None = None) -> Path:
    pg = f'url = "{url}"\n' if url else ""
    path.write_text(f'[store]\npath = "{store}"\n{pg}[limits]\nmax_inflight = 32\n'
                    f'[batches]\nshare = 0.25\npoll_seconds = 0.1\nlease_seconds = 2\n'
                    f'[models.final]\nbase_urls = ["{upstream}"]\n')
    return path


def submit(base: str) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    body = b"".join(orjson.dumps({"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": {"model": "final", "messages": [{"role": "user",
                                                                           "content": f"n{i}"}]}}) + b"\n"
                    for i in range(LINES))
    f = client.files.create(file=("in.jsonl", body), purpose="batch")
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    return client, batch.id


def wait(client: openai.OpenAI, batch_id: str, ok: Callable[[Any], bool], seconds: float = 240) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if ok(batch):
            return batch
        time.sleep(0.05)
    raise AssertionError(f"batch never reached the state: {batch}")


def exactly_once(client: openai.OpenAI, batch: Any) -> None:
    assert batch.status == "completed", batch
    assert (batch.request_counts.completed, batch.request_counts.failed) == (LINES, 0)
    lines = [orjson.loads(x) for x in client.files.content(batch.output_file_id).content.splitlines()]
    assert Counter(line["custom_id"] for line in lines) == Counter(f"q{i}" for i in range(LINES))
    assert all(line["response"]["status_code"] == 200 for line in lines)
    assert batch.error_file_id is None


def halfway(batch: Any) -> bool:
    return bool(batch.request_counts and batch.request_counts.completed >= LINES // 2)


def test_kill_9_halfway_then_restart_runs_every_line_once(tmp_path: Path) -> None:
    up = LoopbackUpstream(mode="final", events=FINAL, pace=True, interval=0.005)
    with up.running() as url:
        cfg = config(tmp_path / "gw.toml", url, tmp_path / "gw.sqlite3")
        with run_gateway(cfg) as gw:
            client, batch_id = submit(gw.url)
            seen = wait(client, batch_id, halfway)
            assert seen.request_counts.completed < LINES  # killed mid-batch
            crash(gw.process)  # the workers too: with N of them, serve alone is not a crash
        with run_gateway(cfg) as gw:
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
            exactly_once(client, wait(client, batch_id, lambda b: b.status == "completed"))
    assert up.requests >= LINES


def test_two_replicas_share_a_batch_and_one_finishes_what_the_killed_one_held(tmp_path: Path) -> None:
    up = LoopbackUpstream(mode="final", events=FINAL, pace=True, interval=0.005)
    with postgres_server() as pg, up.running() as url:
        a_cfg = config(tmp_path / "a.toml", url, tmp_path / "a.sqlite3", pg)
        b_cfg = config(tmp_path / "b.toml", url, tmp_path / "b.sqlite3", pg)
        with run_gateway(a_cfg) as a, run_gateway(b_cfg) as b:
            _, batch_id = submit(a.url)
            client_b = openai.OpenAI(base_url=f"{b.url}/v1", api_key="x", max_retries=0)
            wait(client_b, batch_id, halfway)  # B sees A's batch (one store)
            crash(a.process)  # the workers too: with N of them, serve alone is not a crash
            exactly_once(client_b, wait(client_b, batch_id, lambda x: x.status == "completed"))
