"""``serve --workers N`` starts the machine's counter service (app/cli/limits_service.py): only
when there is more than one worker (with Redis, for the workers' /metrics relay alone), on a
socket in a private directory the workers find in their environment, restarted when it dies,
gone (with its directory) when stopped."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from app.cli import limits_service
from app.engine.gate_hub import GATES_ENV, WORKERS_ENV
from app.engine.signal_hub import SIGNALS_ENV
from app.http.machine_counters import SOCKET_ENV
from app.http.machine_metrics import METRICS_ENV
from tests.support.gateway import config

pytestmark = pytest.mark.timeout(60)


def test_one_worker_needs_no_service(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (SOCKET_ENV, METRICS_ENV, GATES_ENV):
        monkeypatch.setenv(name, "")  # restored after the test
        monkeypatch.delenv(name)
    assert limits_service.start(1, config()) is None
    assert SOCKET_ENV not in os.environ and METRICS_ENV not in os.environ and GATES_ENV not in os.environ


def test_with_redis_only_the_metrics_relay_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis counts and signals between replicas; the workers of this one still merge /metrics."""
    for name in (SOCKET_ENV, SIGNALS_ENV, METRICS_ENV, GATES_ENV, WORKERS_ENV):
        monkeypatch.setenv(name, "")  # restored after the test
        monkeypatch.delenv(name)
    cfg = config()
    with_redis = cfg.model_copy(update={"redis": cfg.redis.model_validate({"url": "redis://127.0.0.1:1/0"})})
    service = limits_service.start(4, with_redis)
    assert service is not None
    try:
        assert SOCKET_ENV not in os.environ and SIGNALS_ENV not in os.environ
        assert GATES_ENV not in os.environ  # each worker keeps its own replica gates with Redis
        assert os.environ[METRICS_ENV] == service.metrics
        _wait(lambda: Path(service.metrics).exists())
        assert stat.S_ISSOCK(os.stat(service.metrics).st_mode)
        assert not Path(service.signals).exists()  # no signal hub: Redis carries the signals
        assert not Path(service.gates).exists()
    finally:
        service.stop()


def _wait(check: Any, limit: float = 15.0) -> None:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < limit
        time.sleep(0.02)


def test_the_service_runs_private_is_restarted_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (SOCKET_ENV, SIGNALS_ENV, METRICS_ENV, GATES_ENV, WORKERS_ENV):
        monkeypatch.setenv(name, "")  # restored after the test
    service = limits_service.start(2, config())
    assert service is not None and service.process is not None
    try:
        assert os.environ[SOCKET_ENV] == service.path
        assert os.environ[GATES_ENV] == service.gates and os.environ[WORKERS_ENV] == "2"
        assert stat.S_ISSOCK(os.stat(service.gates).st_mode)  # the replica gates, same process
        assert stat.S_IMODE(os.stat(service.directory).st_mode) == 0o700
        assert stat.S_ISSOCK(os.stat(service.path).st_mode)
        first = service.process.pid
        os.kill(first, signal.SIGKILL)
        _wait(lambda: service.restarts == 1 and service.process is not None
              and service.process.pid != first and service.process.poll() is None
              and Path(service.path).exists())
    finally:
        service.stop()
    assert service.process.poll() is not None
    assert not Path(service.directory).exists()
