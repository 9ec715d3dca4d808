"""Reading files off the event loop, bounded: a pool of its own, a queue limit, a budget.

PDF text extraction is pure-Python CPU work (pypdf).  It runs in :data:`POOL` (its own
threads, so files cannot take the threads prompts and stores use), at most :data:`QUEUE`
jobs waiting or running (one more is a 503 ``files_busy`` with ``Retry-After``), each under a
:class:`Budget`: a deadline and a cancellation flag that the extraction checks between pages
and every few hundred drawing operators.  A client that leaves sets the flag: the job stops
at its next check instead of burning CPU for nobody.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from app.core.errors import InvalidRequest, Overloaded

T = TypeVar("T")
POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ocm-files")
QUEUE = 8  # jobs running or waiting; beyond, 503
SECONDS = 5.0  # the longest one request's files may take to read
_LOCAL = threading.local()
_jobs = 0


class Cancelled(Exception):
    """The request that wanted the file is gone."""


class Budget:
    def __init__(self, seconds: float | None = None) -> None:
        self.deadline = time.monotonic() + (SECONDS if seconds is None else seconds)
        self.cancelled = threading.Event()

    def check(self, param: str) -> None:
        if self.cancelled.is_set():
            raise Cancelled
        if time.monotonic() > self.deadline:
            raise InvalidRequest(f"input_file: the file takes too long to read (over {SECONDS:g} s "
                                 "of work); is it built to be costly?", param=param,
                                 code="unsupported_file")


def budget() -> Budget:
    """The budget of the job running on this thread (a fresh one outside a job: tests)."""
    found = getattr(_LOCAL, "budget", None)
    return found if isinstance(found, Budget) else Budget()


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
