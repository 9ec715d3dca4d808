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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiosqlite

from app.core.errors import GatewayError

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


@asynccontextmanager
async def transaction(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    lock = _LOCKS.get(db)
    if lock is None:
        lock = _LOCKS[db] = asyncio.Lock()
    async with lock:
        try:
            await db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreBusy(f"The store is busy ({exc}); try again.") from None
        try:
            yield db
            await db.commit()
        except BaseException as exc:
            await asyncio.shield(db.rollback())
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise StoreBusy(f"The store is busy ({exc}); try again.") from None
            raise
