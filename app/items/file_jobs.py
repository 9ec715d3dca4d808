"""Reading files off the event loop, bounded: a pool of its own, a queue limit, a budget, and
a worker process that is killed when the budget runs out.

A request's files are read in :data:`POOL` (its own threads, so files cannot take the threads
prompts and stores use), at most :data:`QUEUE` jobs waiting or running (one more is a 503
``files_busy`` with ``Retry-After``), each under a :class:`Budget`: a deadline and a
cancellation flag.  A client that leaves sets the flag.

Every format but plain UTF-8 text (linear in its size, which ``MAX_FILE_BYTES`` bounds) is read
by :func:`isolated`: in a worker process (:mod:`app.items.file_worker`: one per pool thread,
reused), while the pool thread waits and checks the budget every :data:`TICK` seconds.  When
the deadline passes or the client leaves, the process is killed (SIGKILL) and a fresh one
started for the next file: no part of a library's work (inflating, fonts, forms, nested forms,
whatever a hostile file finds next) outlives the budget, and the CPU stops with the request.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from app.core.errors import InvalidRequest, Overloaded
from app.items.file_worker import Worker, WorkerGone

T = TypeVar("T")
WORKERS = 2  # pool threads, hence worker processes
POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ocm-files")
QUEUE = 8  # jobs running or waiting; beyond, 503
SECONDS = 5.0  # the longest one request's files may take to read
TICK = 0.02  # how often a waiting pool thread looks at its budget
CODE = "unsupported_file"
_LOCAL = threading.local()
_IDLE: list[Worker] = []  # started, waiting for a file
_IDLE_LOCK = threading.Lock()
_jobs = 0


class Cancelled(Exception):
    """The request that wanted the file is gone."""


class Budget:
    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = SECONDS if seconds is None else seconds
        self.deadline = time.monotonic() + self.seconds
        self.cancelled = threading.Event()

    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def check(self, param: str) -> None:
        if self.cancelled.is_set():
            raise Cancelled
        if self.expired():
            raise InvalidRequest(f"input_file: the file takes too long to read (over {self.seconds:g} s "
                                 "of work); is it built to be costly?", param=param, code=CODE)


def budget() -> Budget:
    """The budget of the job running on this thread (a fresh one outside a job: tests)."""
    found = getattr(_LOCAL, "budget", None)
    return found if isinstance(found, Budget) else Budget()


def _worker() -> Worker:
    with _IDLE_LOCK:
        while _IDLE:
            worker = _IDLE.pop()
            if worker.alive():
                return worker
            worker.kill()
    return Worker()


def _release(worker: Worker) -> None:
    with _IDLE_LOCK:
        if worker.alive() and len(_IDLE) < WORKERS:
            _IDLE.append(worker)
            return
    worker.kill()


@atexit.register
def _stop_workers() -> None:
    with _IDLE_LOCK:
        idle, _IDLE[:] = list(_IDLE), []
    for worker in idle:
        worker.kill()


def isolated(reader: str, data: bytes, param: str, limits: dict[str, int]) -> Any:
    """``reader`` (a name in :data:`app.items.file_worker.READERS`) on ``data``, in a worker
    process under this thread's :class:`Budget`: the reader's value, or its 400; a 400 when the
    budget runs out, :class:`Cancelled` when the client left (the process killed in both)."""
    job = budget()
    job.check(param)
    worker = _worker()
    answer: dict[str, Any] = {}
    try:
        try:
            worker.send(reader, data, param, limits)
        except WorkerGone:  # an idle worker that died meanwhile: once more with a fresh one
            worker.kill()
            worker = Worker()
            worker.send(reader, data, param, limits)
        while not worker.ready(min(TICK, job.deadline - time.monotonic())):
            job.check(param)
        answer = worker.answer()
    except WorkerGone:
        raise InvalidRequest("input_file: the file cannot be read (its reader stopped); is it "
                             "damaged or built to be costly?", param=param, code=CODE) from None
    finally:
        if "ok" in answer or "refused" in answer:
            _release(worker)
        else:
            worker.kill()  # past the budget, the client gone, out of memory, or dead
    if "ok" in answer:
        return answer["ok"]
    if "refused" in answer:
        message, where, code = answer["refused"]
        raise InvalidRequest(str(message), param=where if isinstance(where, str) else param,
                             code=code if isinstance(code, str) else CODE)
    if "memory" in answer:
        raise InvalidRequest("input_file: the file needs too much memory to read; is it built to "
                             "be costly?", param=param, code=CODE)
    raise InvalidRequest(f"input_file: the file cannot be read ({answer.get('failed')}); is it "
                         "damaged?", param=param, code=CODE)


async def run(fn: Callable[[], T]) -> T:
    """``fn()`` in the file pool under a fresh :class:`Budget`; cancelling the caller stops it."""
    global _jobs
    if _jobs >= QUEUE:
        raise Overloaded(f"More than {QUEUE} requests with files are being read; try again shortly.",
                         retry_after=2.0)
    _jobs += 1
    job_budget = Budget()

    def job() -> T:
        _LOCAL.budget = job_budget
        try:
            return fn()
        finally:
            _LOCAL.budget = None

    try:
        return await asyncio.get_running_loop().run_in_executor(POOL, job)
    except BaseException:
        job_budget.cancelled.set()  # the client left (or the job failed): stop at the next check
        raise
    finally:
        _jobs -= 1
