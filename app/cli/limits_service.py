"""``serve --workers N`` without Redis: the machine's counter service for per-key limits, and
in the same process the machine's signal hub (:mod:`app.engine.signal_hub`: cancels, upstream
cooldowns, background runs' live events between the workers; its socket beside the counters'
one, in ``OCMGW_SIGNALS_SOCKET``).

:func:`start` (called by ``serve`` before the workers start) runs
``python -m app.http.machine_counters`` as a process of its own session (a Ctrl-C on the
terminal does not stop it while the workers drain) on a Unix socket in a fresh private
directory (``mkdtemp``: mode 0700, so only this user can connect), waits until it accepts
connections, and puts its path in ``OCMGW_COUNTERS_SOCKET``, which the workers inherit
(:func:`app.http.machine_counters.from_environment`).  It does nothing for one worker.  A
thread restarts the service whenever it exits (its state is lost, see
:mod:`app.http.machine_counters`); :meth:`Service.stop` (at the supervisor's exit) ends it
and removes the directory; killed with the supervisor, the service exits on its own within
0.5 s (it watches its parent).  The same process relays the workers'
``/metrics`` (:mod:`app.http.machine_metrics`, ``OCMGW_METRICS_SOCKET``); with ``[redis] url``
that relay is all it is started for (Redis counts and signals between replicas).  Without
Redis it also holds the machine's replica gates (:mod:`app.engine.gate_hub`: each bounded
upstream replica's slots for all the workers; ``gates.sock``, in ``OCMGW_GATES_SOCKET``, the
worker count in ``OCMGW_WORKER_COUNT``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from app.config import GatewayConfig
from app.engine.gate_hub import GATES_ENV, WORKERS_ENV
from app.engine.signal_hub import SIGNALS_ENV
from app.http.machine_counters import SOCKET_ENV
from app.http.machine_metrics import METRICS_ENV

READY_TIMEOUT = 10.0
RESTART_GRACE = 0.5  # a restarted service's first seconds: the workers re-register their slots


class Service:
    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.directory = tempfile.mkdtemp(prefix="ocm-gateway-limits-")  # 0700
        self.path = os.path.join(self.directory, "counters.sock")
        self.signals = os.path.join(self.directory, "signals.sock")  # the signal hub, same process
        self.metrics = os.path.join(self.directory, "metrics.sock")  # the /metrics relay, same process
        self.gates = os.path.join(self.directory, "gates.sock")  # the replica gates, same process
        self.hub = True  # False with Redis: Redis carries the signals, the relay alone is used
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._started = 0.0
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def _spawn(self, grace: float = 0.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.http.machine_counters", self.path, str(self.lease_seconds),
             str(os.getpid()), str(grace), self.signals if self.hub else "", self.metrics,
             self.gates if self.hub else ""],
            start_new_session=True)
        self._started = time.monotonic()
        deadline = self._started + READY_TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None and not self._stopping.is_set():
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(self.path)
                    return
                except OSError:
                    time.sleep(0.02)
        raise RuntimeError(f"the limits service did not start (exit code {self.process.poll()})")

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="limits-service", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            assert self.process is not None
            code = self.process.wait()
            if self._stopping.wait(0.1 if time.monotonic() - self._started > 5 else 1.0):
                return
            self.restarts += 1
            print(f"ocm-gateway: the limits service exited ({code}); restarting it", file=sys.stderr)
            try:
                self._spawn(RESTART_GRACE)
            except (OSError, RuntimeError) as exc:
                if not self._stopping.is_set():
                    print(f"ocm-gateway: {exc}; trying again", file=sys.stderr)

    def _end(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stop(self) -> None:
        self._stopping.set()
        self._end()
        if self._watcher is not None:  # it may have been starting a new one meanwhile
            self._watcher.join(READY_TIMEOUT + 2)
            self._end()
        shutil.rmtree(self.directory, ignore_errors=True)


def start(workers: int, cfg: GatewayConfig) -> Service | None:
    """The counter service for ``workers`` workers of ``cfg`` (None when not needed), running,
    its socket in the environment the workers will inherit, stopped at exit."""
    if workers <= 1:
        return None
    service = Service(cfg.redis.lease_seconds)
    service.hub = not cfg.redis.url
    service.start()
    if not cfg.redis.url:  # with Redis, Redis counts and signals; the workers' /metrics still merge
        os.environ[SOCKET_ENV] = service.path
        os.environ[SIGNALS_ENV] = service.signals
        os.environ[GATES_ENV] = service.gates  # each bounded replica's slots: one bound for all
        os.environ[WORKERS_ENV] = str(workers)
    os.environ[METRICS_ENV] = service.metrics
    atexit.register(service.stop)
    return service
