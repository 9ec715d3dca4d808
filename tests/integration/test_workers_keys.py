"""``ocm-gateway serve --workers 2``: a key revoked, rotated or changed through ``/admin/keys`` on
one worker is in force on the other before the admin call returns (app/http/keys.py, through the
machine's signal hub; with ``[redis] url`` through Redis), not after ``[auth] key_cache_seconds``
(60 s here, the most it can be, so waiting for the cache cannot pass these tests); and
``/admin/usage`` on one worker counts the other worker's requests not flushed yet (``[usage]
flush_seconds`` 60 s here).  Each request goes on a connection whose worker is known from /proc
(tests/integration/test_workers_limits.py)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import serve_workers
from tests.integration.test_workers_limits import pinned, worker_of
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import Running
from tests.support.redis_server import redis_server
from tests.support.wire import load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
FINAL = [c["text"].encode() for c in load("03a_completion_tokenids_stream")["response"]["chunks"]]
ADMIN = "admin-secret-w40k"
ADMIN_H = {"authorization": f"Bearer {ADMIN}"}
UPSTREAM = LoopbackUpstream(mode="final", events=FINAL)


def _config(tmp: Path, upstream: str, extra: str = "") -> Path:
    config = tmp / "gw.toml"
    config.write_text(f'[store]\npath = "{tmp / "r.sqlite3"}"\n'
                      f'[admin]\nkey_sha256 = "{hashlib.sha256(ADMIN.encode()).hexdigest()}"\n'
                      f'[auth]\nkey_cache_seconds = 60.0\n[usage]\nflush_seconds = 60.0\n{extra}'
                      f'[models.final]\nbase_urls = ["{upstream}"]\n'
                      f'[models.other]\nbase_urls = ["{upstream}"]\n')
    return config


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-keys")
    with UPSTREAM.running() as url, serve_workers(_config(tmp, url)) as running:
        yield running


@pytest.fixture(scope="module")
def redis_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("workers-keys-redis")
    with UPSTREAM.running() as url, redis_server() as redis, \
            serve_workers(_config(tmp, url, f'[redis]\nurl = "{redis.url}"\n')) as running:
        yield running


def ask(client: httpx.Client, gw: Running, pid: int, secret: str, model: str = "final") -> int:
    """A generation with ``secret`` on worker ``pid``: its status code."""
    r = client.post("/v1/responses", json={"model": model, "input": "hi", "store": False},
                    headers={"authorization": f"Bearer {secret}"})
    assert worker_of(r, gw) == pid  # still the worker it was pinned to
    return r.status_code


def admin(client: httpx.Client, gw: Running, pid: int, path: str, body: object = None) -> httpx.Response:
    r = client.post(path, headers=ADMIN_H) if body is None else client.post(path, json=body, headers=ADMIN_H)
    assert worker_of(r, gw) == pid and r.status_code in (200, 201), r.text
    return r


def _revoked_at_once(gw: Running, within: float = 0.0) -> float:
    """Revoke on A a key B has cached; B's requests from then on: 401 (``within`` 0: the very
    next one; else polled for up to ``within`` seconds).  How long B took to refuse it."""
    a, b, pa, pb = pinned(gw)
    made = admin(a, gw, pa, "/admin/keys", {"name": "leaked"}).json()
    assert ask(b, gw, pb, made["secret"]) == 200  # B has it cached now (for 60 s)
    assert ask(a, gw, pa, made["secret"]) == 200
    admin(a, gw, pa, f"/admin/keys/{made['id']}/revoke")
    t0 = time.monotonic()
    while ask(b, gw, pb, made["secret"]) != 401:  # was 200 for up to key_cache_seconds
        assert time.monotonic() - t0 < within, "the other worker still takes the revoked key"
        time.sleep(0.01)
    took = time.monotonic() - t0
    assert ask(a, gw, pa, made["secret"]) == 401
    return took


def test_a_key_revoked_on_one_worker_is_refused_by_the_other_at_once(gateway: Running) -> None:
    _revoked_at_once(gateway)


def test_a_rotated_or_restricted_key_changes_on_the_other_worker_at_once(gateway: Running) -> None:
    a, b, pa, pb = pinned(gateway)
    made = admin(a, gateway, pa, "/admin/keys", {"name": "rotated"}).json()
    assert ask(b, gateway, pb, made["secret"], "other") == 200  # cached on B
    admin(a, gateway, pa, f"/admin/keys/{made['id']}", {"models": ["final"]})
    assert ask(b, gateway, pb, made["secret"], "other") == 404  # outside its new allow-list
    assert ask(b, gateway, pb, made["secret"], "final") == 200
    rotated = admin(a, gateway, pa, f"/admin/keys/{made['id']}/rotate").json()
    assert ask(b, gateway, pb, made["secret"]) == 401  # the old secret
    assert ask(b, gateway, pb, rotated["secret"]) == 200


def test_admin_usage_counts_the_other_workers_unflushed_requests(gateway: Running) -> None:
    """B served three requests it has not flushed (flush every 60 s); /admin/usage on A counts
    them: A asks every worker to flush first.  Was: A's own counts only."""
    a, b, pa, pb = pinned(gateway)
    made = admin(a, gateway, pa, "/admin/keys", {"name": "counted"}).json()
    for _ in range(3):
        assert ask(b, gateway, pb, made["secret"]) == 200
    assert ask(a, gateway, pa, made["secret"]) == 200
    r = a.get("/admin/usage", params={"key": made["id"], "group_by": "key"}, headers=ADMIN_H)
    assert worker_of(r, gateway) == pa and r.status_code == 200, r.text
    body = r.json()
    assert [row["requests"] for row in body["data"]] == [4], body
    assert body["workers"] == {"answered": 2, "connected": 2}
    r = b.get("/admin/usage", params={"key": made["id"], "group_by": "key"}, headers=ADMIN_H)
    assert worker_of(r, gateway) == pb and [row["requests"] for row in r.json()["data"]] == [4]


def test_with_redis_a_revoked_key_is_refused_by_the_other_worker_at_once(redis_gateway: Running) -> None:
    """With ``[redis] url`` the workers (and replicas) hear key changes on a Redis channel
    (asynchronously: allowed half a second, not the 60 s cache)."""
    assert _revoked_at_once(redis_gateway, within=0.5) < 0.5
