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
* a busy file is waited for, up to :data:`BUSY_MS` (``busy_timeout``); past that the write
  fails as a 503 ``store_busy`` (retryable), never a 500 that sticks.
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypeVar

import aiosqlite

from app.core.errors import GatewayError

T = TypeVar("T")
BUSY_MS = 5000
_LOCKS: weakref.WeakKeyDictionary[aiosqlite.Connection, asyncio.Lock] = weakref.WeakKeyDictionary()


class StoreBusy(GatewayError):
    status = 503
    type = "server_error"
    code = "store_busy"


async def configure(db: aiosqlite.Connection) -> None:
    """WAL, a bounded wait on a busy file, and no transaction opened behind our back."""
    await db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
    await db.execute("PRAGMA journal_mode=WAL")
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


async def _begin(db: aiosqlite.Connection) -> None:
    try:
        await _complete(db.execute("BEGIN IMMEDIATE"))
    except sqlite3.OperationalError as exc:
        if "within a transaction" not in str(exc):
            raise StoreBusy(f"The store is busy ({exc}); try again.") from None
        # Left open by a statement outside these transactions: undo it and start afresh.
        await _complete(db.rollback())
        try:
            await _complete(db.execute("BEGIN IMMEDIATE"))
        except sqlite3.OperationalError as again:
            raise StoreBusy(f"The store is busy ({again}); try again.") from None


@asynccontextmanager
async def transaction(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """One write: ``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on any error or
    cancellation (which are finished before the lock is released, cancelled or not)."""
    lock = _LOCKS.get(db)
    if lock is None:
        lock = _LOCKS[db] = asyncio.Lock()
    async with lock:
        await _begin(db)
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
