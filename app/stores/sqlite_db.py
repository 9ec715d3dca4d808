"""What every SQLite store of the gateway shares: connection settings and write transactions.

The stores (responses, conversations, stored chat completions) each hold one aiosqlite
connection that all requests share, and several connections (stores, worker processes)
write to one file.  So:

* every write is one transaction (:func:`transaction`): ``BEGIN IMMEDIATE`` (the file's write
  lock is taken up front, never upgraded mid-way), committed at the end, rolled back on any
  error, so a batch is stored whole or not at all and the connection is never left inside a
  failed transaction;
* one write transaction at a time per connection (a lock per connection): requests sharing a
  connection cannot commit each other's half-done work;
* a busy file is waited for, up to :data:`BUSY_MS` in all: SQLite's ``busy_timeout`` waits
  for another connection's write lock, but not when this connection still reads an older
  snapshot (a cursor of a concurrent read on the shared connection: ``SQLITE_BUSY_SNAPSHOT``,
  answered at once, since waiting inside SQLite cannot help); ``BEGIN`` is then tried again
  with a short backoff until the same deadline.  Past it the write fails as a 503
  ``store_busy`` with ``Retry-After`` (retryable, nothing half-written), never a 500.

:func:`~app.stores.sqlite_write.write` is the same transaction in one hop to the connection's
thread, with the writes queued behind it committed together (group commit).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
import weakref
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypeVar

import aiosqlite

from app.core.errors import Overloaded

T = TypeVar("T")
BUSY_MS = 5000
OPEN_MS = 30_000  # how long opening a store waits for other openers of its file
_LOCKS: weakref.WeakKeyDictionary[aiosqlite.Connection, asyncio.Lock] = weakref.WeakKeyDictionary()


class StoreBusy(Overloaded):
    """503 with ``Retry-After``: the write was not made and may be sent again."""

    code = "store_busy"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after=retry_after)


async def configure(db: aiosqlite.Connection) -> None:
    """WAL, a bounded wait on a busy file, and no transaction opened behind our back.

    Worker processes open one new file at once, and switching it to WAL needs the file to
    itself: SQLite answers ``database is locked`` at once there (its busy handler is not
    called where waiting could deadlock), so the switch is tried again with a short backoff,
    up to :data:`OPEN_MS` (one worker's failed start stopped ``serve --workers 2``)."""
    await db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
    deadline = time.monotonic() + OPEN_MS / 1000
    pause = 0.005
    while True:
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.2)
    await db.execute("PRAGMA synchronous=NORMAL")


async def _complete(step: Awaitable[T]) -> T:
    """Await ``step`` to its end even if the caller is cancelled meanwhile (then re-raise): a
    ``BEGIN`` or ``ROLLBACK`` already queued on the connection's thread runs anyway, and
    leaving before it did would leave the connection inside a transaction."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def _begin_once(db: aiosqlite.Connection) -> None:
    try:
        await _complete(db.execute("BEGIN IMMEDIATE"))
    except sqlite3.OperationalError as exc:
        if "within a transaction" not in str(exc):
            raise
        # Left open by a statement outside these transactions: undo it and start afresh.
        await _complete(db.rollback())
        await _complete(db.execute("BEGIN IMMEDIATE"))


async def _begin(db: aiosqlite.Connection) -> None:
    """``BEGIN IMMEDIATE``, tried again while the file stays busy, up to :data:`BUSY_MS`."""
    deadline = time.monotonic() + BUSY_MS / 1000
    pause = 0.002
    while True:
        try:
            await _begin_once(db)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreBusy(f"The store is busy ({exc}); try again.") from None
            await asyncio.sleep(min(left, pause * (0.5 + random.random())))
            pause = min(pause * 2, 0.1)


def _lock(db: aiosqlite.Connection) -> asyncio.Lock:
    lock = _LOCKS.get(db)
    if lock is None:
        lock = _LOCKS[db] = asyncio.Lock()
    return lock


@asynccontextmanager
async def transaction(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """One write: ``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on any error or
    cancellation (which are finished before the lock is released, cancelled or not)."""
    async with _lock(db):
        try:
            await _begin(db)
        except BaseException:
            # cancelled while its BEGIN ran (it is awaited to its end, then the cancel goes on):
            # left open, the file's write lock would be held until this connection's next write,
            # and every other connection and worker process would get ``store_busy`` meanwhile
            if db.in_transaction:
                await _complete(db.rollback())
            raise
        try:
            yield db
        except BaseException as exc:
            await _complete(db.rollback())
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise StoreBusy(f"The store is busy ({exc}); try again.") from None
            raise
        try:
            await _complete(db.commit())
        except BaseException:
            if db.in_transaction:
                await _complete(db.rollback())
            raise
