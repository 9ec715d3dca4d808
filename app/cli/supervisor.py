"""``serve`` with more than one worker: uvicorn's supervisor, patient with a slow worker.

:func:`run` is ``uvicorn.run`` for one worker.  For N it binds the socket and runs
:class:`Supervisor`, uvicorn's ``Multiprocess`` with four differences, about a worker that is
slow rather than dead, and about the end of the supervisor:

* **The health-check timeout is** :data:`HEALTHCHECK_SECONDS` **(30 s, uvicorn's is 5 s).**  The
  supervisor pings each worker every 0.5 s through a pipe that a thread of the worker answers.
  A worker being spawned answers only once its interpreter has started and imported the
  gateway's command line; on a loaded machine (load 8-10 on 2 cores: ``serve`` healthy after
  17 s with one worker, 40 s with two), or with one worker starved of CPU for a few seconds,
  that ran past 5 s and the supervisor SIGKILLed a healthy worker, dropping its connections,
  and spawned another (which loads the machine more).  30 s is gunicorn's default worker
  timeout; a worker that is really hung is still replaced, after 30 s instead of 5.
* **A slow ping does not hold up signals.**  uvicorn waits for one worker's answer for the
  whole timeout before it reads its signal queue, so a SIGTERM during a slow ping would wait up
  to 30 s per worker.  Here the wait is in 0.25 s slices and gives way to a queued signal (the
  ping is asked again on the next round; a late answer still in the pipe counts as one).
* **Workers follow the supervisor.**  A worker gets SIGTERM when the supervisor dies (Linux
  ``PR_SET_PDEATHSIG``, set as the worker starts, :class:`WorkerConfig`): after a ``kill -9`` of
  ``serve`` its workers drain and exit as on SIGTERM instead of serving on, unsupervised, from
  the old socket (a restarted ``serve`` could not bind its port).  Elsewhere (no ``prctl``)
  they are not followed.
* **Shutdown is bounded.**  After SIGTERM each worker gets ``timeout_graceful_shutdown`` (the
  gateway's drain) plus :data:`EXIT_MARGIN_SECONDS` to exit, then SIGKILL; uvicorn waits forever
  for a worker that never exits (a stopped or hung one).

The worker processes, the shared socket, SIGHUP/TTIN/TTOU and the start-up-failure rule (a
worker that fails before serving stops the supervisor) are uvicorn's.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import time
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process, logger

HEALTHCHECK_SECONDS = 30
SLICE_SECONDS = 0.25
EXIT_MARGIN_SECONDS = 15.0
PR_SET_PDEATHSIG = 1


def follow_parent(parent: int, sig: int = signal.SIGTERM) -> bool:
    """In a worker: ``sig`` to this process when ``parent`` (the supervisor) dies; whether the
    kernel will send it (Linux).  A parent already gone sends it at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # died before the prctl: nobody would send it
        os.kill(os.getpid(), sig)
    return True


class WorkerConfig(uvicorn.Config):
    """uvicorn's ``Config``, which each worker unpickles and starts with ``configure_logging``:
    there, in a worker (not the supervisor), it also asks for :func:`follow_parent`."""

    supervisor_pid = 0

    def configure_logging(self) -> None:
        super().configure_logging()
        if self.supervisor_pid and os.getpid() != self.supervisor_pid:
            follow_parent(self.supervisor_pid)


class Supervisor(Multiprocess):
    """uvicorn's ``Multiprocess`` with signal-aware health checks and a bounded shutdown."""

    def answers(self, process: Process) -> bool | None:
        """True: the worker answered the ping; False: it is gone or did not answer within the
        timeout; None: a signal arrived first (undecided, asked again next round)."""
        if not process.process.is_alive():
            return False
        try:
            process.parent_conn.send(b"ping")
            deadline = time.monotonic() + self.config.timeout_worker_healthcheck
            while True:
                if process.parent_conn.poll(SLICE_SECONDS):
                    process.parent_conn.recv()
                    return True
                if self.signal_queue or self.should_exit.is_set():
                    return None
                if time.monotonic() >= deadline or not process.process.is_alive():
                    return False
        except (OSError, EOFError, pickle.UnpicklingError):
            return False

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            answered = self.answers(process)
            if answered is None:
                return  # handle the signal first
            if answered:
                continue
            logger.warning(f"Child process [{process.pid}] did not answer its health check in "
                           f"{self.config.timeout_worker_healthcheck} s; replacing it")
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                logger.error(f"Child process [{process.pid}] failed to start, stopping the parent process.")
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            replacement = Process(self.config, self.sockets)
            replacement.start()
            self.processes[idx] = replacement

    def join_all(self) -> None:
        grace = float(self.config.timeout_graceful_shutdown or 0) + EXIT_MARGIN_SECONDS
        deadline = time.monotonic() + grace
        for process in self.processes:
            logger.info(f"Waiting for child process [{process.pid}]")
            process.process.join(max(0.0, deadline - time.monotonic()))
            if process.process.is_alive():
                logger.warning(f"Child process [{process.pid}] still running {grace:g} s after "
                               "SIGTERM; killing it")
                process.process.kill()
                process.process.join()


def run(app: str, **kwargs: Any) -> None:
    """``uvicorn.run(app, **kwargs)``; with ``workers`` > 1 under :class:`Supervisor`."""
    kwargs.setdefault("timeout_worker_healthcheck", HEALTHCHECK_SECONDS)
    if int(kwargs.get("workers") or 1) <= 1:
        uvicorn.run(app, **kwargs)
        return
    config = WorkerConfig(app, **kwargs)
    config.supervisor_pid = os.getpid()
    sock = config.bind_socket()
    try:
        Supervisor(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
