"""One SQLite write in one hop to the connection's thread, and the writes that queue behind it
committed together (group commit).

:func:`write` runs ``work(connection)`` as one write transaction in the aiosqlite connection's
own thread: ``BEGIN IMMEDIATE``, the work, ``COMMIT`` (``ROLLBACK`` on any error), one hop there
and back instead of one per statement.  The job goes straight onto aiosqlite's queue (what
``Connection._execute`` does for every call, without its task and shield), so it stays ordered
with the connection's other calls.

While one write is under way, the writes made meanwhile wait in a queue; when it ends they go
to the thread together as one transaction, each of them inside a ``SAVEPOINT`` of its own: one
``BEGIN``/``COMMIT`` and one write of each touched page for all of them instead of one each
(a busy gateway stores a response as it ends, and 32 of them end at once).  A work that fails
rolls back to its savepoint and only its caller gets the error; the others are committed.  Each
caller is answered only once the transaction holding its work has committed, so durability is
as before: the connection's (WAL, ``synchronous=NORMAL``: a commit survives a crash of the
process, not of the machine).  A lone write (nothing queued, nothing under way) takes no queue:
it is the one hop it was.

A busy file is waited for as :func:`~app.stores.sqlite_db.transaction` does (each write up to
its own deadline, then 503 ``store_busy``).  A caller cancelled while its work is queued leaves
at once and its work is never run; one cancelled while its work runs leaves once the
transaction has finished (committed or rolled back): the connection is never left inside one.
"""

from __future__ import annotations

import asyncio
import functools
import random
import sqlite3
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiosqlite

from app.stores import sqlite_db
from app.stores.sqlite_db import StoreBusy, _complete, _lock

T = TypeVar("T")
Work = Callable[[sqlite3.Connection], Any]


class _BeginBusy(Exception):
    """``BEGIN IMMEDIATE`` found the file busy (nothing was run): try again."""

    def __init__(self, error: sqlite3.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


def _begin(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:  # left open by a statement outside these transactions
        conn.rollback()
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise _BeginBusy(exc) from None
        raise


def _whole(conn: sqlite3.Connection, work: Work) -> Any:
    """In the connection's thread: ``work`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled
    back on any error."""
    _begin(conn)
    try:
        out = work(conn)
        conn.commit()
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise
    return out


def _group(conn: sqlite3.Connection, works: list[Work]) -> list[tuple[bool, Any]]:
    """In the connection's thread: every work in one transaction, each inside its own
    savepoint; ``(True, result)`` or ``(False, error)`` for each, in order.  An error outside
    the works (``BEGIN``, ``COMMIT``, a savepoint that cannot be rolled back) is raised: then
    nothing was committed."""
    _begin(conn)
    outcomes: list[tuple[bool, Any]] = []
    try:
        for work in works:
            conn.execute("SAVEPOINT w")
            try:
                out = work(conn)
            except Exception as exc:
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
                outcomes.append((False, exc))
                continue
            conn.execute("RELEASE w")
            outcomes.append((True, out))
        conn.commit()
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise
    return outcomes


def _submit(db: aiosqlite.Connection, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
    """``fn(*args)`` queued on the connection's thread now (``Connection._execute`` without its
    coroutine); the future gets its result or its error."""
    if not db._running or not db._connection:
        raise ValueError("Connection closed")
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    db._tx.put_nowait((future, functools.partial(fn, *args)))
    return future


def _nothing() -> None:
    return None


def _busy(error: BaseException) -> BaseException:
    if isinstance(error, _BeginBusy):
        return StoreBusy(f"The store is busy ({error.error}); try again.")
    if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
        return StoreBusy(f"The store is busy ({error}); try again.")
    return error


@dataclass(eq=False)
class _Waiting:
    work: Work
    deadline: float
    running: bool = False  # in a transaction under way in the connection's thread
    answer: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class _Queue:
    """The writes made on one connection while another was under way."""

    def __init__(self) -> None:
        self.items: list[_Waiting] = []
        self.alone = False  # a lone write is under way (it took no queue)
        self.flusher: asyncio.Task[None] | None = None

    def idle(self) -> bool:
        return not self.alone and not self.items and (self.flusher is None or self.flusher.done())

    def kick(self, db: aiosqlite.Connection) -> None:
        """Commit what is queued, unless a write under way will see to it."""
        if self.items and not self.alone and (self.flusher is None or self.flusher.done()):
            self.flusher = asyncio.get_running_loop().create_task(_drain(db, self))


_QUEUES: weakref.WeakKeyDictionary[aiosqlite.Connection, _Queue] = weakref.WeakKeyDictionary()


async def write(db: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """``work(connection)`` as one write transaction (with the writes queued beside it, see
    the module's docstring), run in the connection's thread; committed when this returns.
    ``work`` must only use the ``sqlite3`` connection it is given, must not block on anything
    but SQLite, and must not commit or roll back itself."""
    queue = _QUEUES.get(db)
    if queue is None:
        queue = _QUEUES[db] = _Queue()
    if queue.idle():
        queue.alone = True
        try:
            result: T = await _alone(db, work)
            return result
        finally:
            queue.alone = False
            queue.kick(db)
    _submit_check(db)
    waiting = _Waiting(work, time.monotonic() + sqlite_db.BUSY_MS / 1000)
    queue.items.append(waiting)
    queue.kick(db)
    try:
        result = await asyncio.shield(waiting.answer)
        return result
    except asyncio.CancelledError:
        if waiting in queue.items:  # not taken yet: it will never run
            queue.items.remove(waiting)
        if waiting.running:  # in the transaction under way: leave once it has ended
            await asyncio.wait([waiting.answer])
        else:  # queued, or waiting for a busy file: it will never run
            waiting.answer.cancel()
        raise


def _submit_check(db: aiosqlite.Connection) -> None:
    if not db._running or not db._connection:
        raise ValueError("Connection closed")


async def _alone(db: aiosqlite.Connection, work: Work) -> Any:
    """A lone write: one hop, retried while ``BEGIN`` finds the file busy, up to the deadline."""
    deadline = time.monotonic() + sqlite_db.BUSY_MS / 1000
    pause = 0.002
    async with _lock(db):
        while True:
            job = _submit(db, _whole, db._conn, work)
            try:
                return await job
            except asyncio.CancelledError:
                if job.cancelled():  # it still runs there: leave once it has (the queue is FIFO)
                    await _complete(_submit(db, _nothing))
                raise
            except _BeginBusy as busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _busy(busy) from None
                await asyncio.sleep(min(left, pause * (0.5 + random.random())))
                pause = min(pause * 2, 0.1)
            except sqlite3.OperationalError as exc:
                raise _busy(exc) from None


async def _drain(db: aiosqlite.Connection, queue: _Queue) -> None:
    """Commit the queued writes, all that are queued at each turn in one transaction, until
    none are left.  Whatever ends this (the connection closed, the loop shut down), no caller
    is left waiting."""
    batch: list[_Waiting] = []
    try:
        while queue.items:
            async with _lock(db):  # ``transaction`` users share the connection
                batch, queue.items = queue.items, []
                await _commit(db, batch)
                batch = []
    except BaseException as exc:
        stopped = _busy(exc) if isinstance(exc, Exception) else StoreBusy(
            "The store's writer stopped; try again.")
        for waiting in [*batch, *queue.items]:
            if not waiting.answer.done():
                waiting.answer.set_exception(stopped)
        queue.items = []
        if not isinstance(exc, Exception):
            raise
        # (an error here, the connection closed: its callers have it; nothing is left to do)


async def _commit(db: aiosqlite.Connection, batch: list[_Waiting]) -> None:
    """``batch`` in one transaction, ``BEGIN`` tried again while the file is busy (each write
    answered ``store_busy`` once past its own deadline); every caller answered."""
    pause = 0.002
    while True:
        live = [w for w in batch if not w.answer.done()]  # (callers gone while it waited)
        if not live:
            return
        job = _submit(db, _group, db._conn, [w.work for w in live])
        for waiting in live:
            waiting.running = True
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            await asyncio.wait([job])  # it runs there anyway: its callers get what it did
            _settle(live, job, retry=False)
            raise
        except Exception:
            pass  # read from the job below
        finally:
            for waiting in live:
                waiting.running = False
        if _settle(live, job, retry=True):
            return
        now = time.monotonic()
        soonest = min((w.deadline for w in live if not w.answer.done()), default=now)
        await asyncio.sleep(max(0.0, min(soonest - now, pause * (0.5 + random.random()))))
        pause = min(pause * 2, 0.1)


def _settle(live: list[_Waiting], job: asyncio.Future[list[tuple[bool, Any]]], *, retry: bool) -> bool:
    """Answer ``live``'s callers from the finished ``job``; False when ``BEGIN`` found the file
    busy and it is to be tried again (the callers past their deadline answered ``store_busy``)."""
    error = job.exception()
    if error is None:
        for waiting, (ok, value) in zip(live, job.result(), strict=True):
            if not waiting.answer.done():
                if ok:
                    waiting.answer.set_result(value)
                else:
                    waiting.answer.set_exception(_busy(value))
        return True
    if retry and isinstance(error, _BeginBusy):
        now = time.monotonic()
        for waiting in live:
            if waiting.deadline <= now and not waiting.answer.done():
                waiting.answer.set_exception(_busy(error))
        return False
    for waiting in live:  # BEGIN or COMMIT failed: nothing was committed
        if not waiting.answer.done():
            waiting.answer.set_exception(_busy(error))
    return True
