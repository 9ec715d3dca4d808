"""``serve --workers 2`` (the default on two cores) without ``[responses] encryption_key``: the
``encrypted_content`` one worker seals opens on the other.  An agent SDK sends
``include: ["reasoning.encrypted_content"]`` with ``store: false`` and passes the reasoning item
back on its next turn, over whichever connection it has: with a random key per process, a turn
that reached the other worker was a 400 ``invalid_encrypted_content``.  Each request goes on a
connection whose worker is known from /proc (tests/integration/test_workers_limits.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import serve_workers
from tests.integration.test_workers_limits import pinned, worker_of
from tests.support.fake_llamacpp import sse_events
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import Running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
Json = dict[str, Any]
SCRIPT = ("<|channel|>analysis<|message|>The user greets; answer briefly.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>Hello there.<|return|>")
REASONING = LoopbackUpstream(mode="final", events=sse_events(SCRIPT))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-sealing")
    with REASONING.running() as url:
        config = tmp / "gw.toml"  # no [responses] encryption_key: the random key of this serve
        config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n'
                          f'[models.think]\nbackend = "llamacpp"\nbase_urls = ["{url}"]\n'
                          f'[models.think.harmony]\ncurrent_date = "2026-11-28"\n')
        with serve_workers(config) as running:
            yield running


def turn(client: httpx.Client, gw: Running, pid: int, items: list[Json]) -> httpx.Response:
    r = client.post("/v1/responses", json={"model": "think", "input": items, "store": False,
                                           "include": ["reasoning.encrypted_content"]})
    assert worker_of(r, gw) == pid
    return r


def test_reasoning_sealed_by_one_worker_opens_on_the_other(gateway: Running) -> None:
    a, b, pa, pb = pinned(gateway)
    try:
        history: list[Json] = [{"role": "user", "content": "Hi"}]
        for client, pid in [(a, pa), (b, pb), (a, pa), (b, pb)]:  # each turn on the other worker
            r = turn(client, gateway, pid, history)
            assert r.status_code == 200, r.text
            output = r.json()["output"]
            reasoning = [item for item in output if item["type"] == "reasoning"]
            assert reasoning and reasoning[0]["encrypted_content"].startswith("ocm1.")
            history += [*output, {"role": "user", "content": "And again?"}]
        forged = {**reasoning[0], "encrypted_content": reasoning[0]["encrypted_content"][:-4] + "AAAA"}
        r = turn(a, gateway, pa, [*history[:-1], forged, {"role": "user", "content": "x"}])
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_encrypted_content"
    finally:
        a.close()
        b.close()
