"""``serve --workers N`` without Redis starts the machine's counter service
(app/cli/limits_service.py): only when there is more than one worker and no Redis, on a socket
in a private directory the workers find in their environment, restarted when it dies, gone
(with its directory) when stopped."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from app.cli import limits_service
from app.http.machine_counters import SOCKET_ENV
from tests.support.gateway import config

pytestmark = pytest.mark.timeout(60)


def test_one_worker_or_redis_needs_no_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    cfg = config()
    assert limits_service.start(1, cfg) is None
    with_redis = cfg.model_copy(update={"redis": cfg.redis.model_validate({"url": "redis://127.0.0.1:1/0"})})
    assert limits_service.start(4, with_redis) is None
    assert SOCKET_ENV not in os.environ


def _wait(check: Any, limit: float = 15.0) -> None:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < limit
        time.sleep(0.02)


def test_the_service_runs_private_is_restarted_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SOCKET_ENV, "")  # restored after the test
    service = limits_service.start(2, config())
    assert service is not None and service.process is not None
    try:
        assert os.environ[SOCKET_ENV] == service.path
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
