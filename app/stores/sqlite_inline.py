"""A second connection to a store's SQLite file, used on the event loop's own thread for small
writes while the file is free.

A write through aiosqlite is a hop to the connection's thread and back: on a small VM ~100 µs
of thread wake-ups around ~16 µs of SQLite work for a stored response (``python -m
benchmarks.store_write``), and a stored stream makes two of them on its client's path.  So a
small write (:data:`SMALL_BYTES`) that finds nothing else being written by this connection is
made here instead, synchronously: ``BEGIN IMMEDIATE`` without waiting (``busy_timeout=0``), the
work, ``COMMIT``.  When the file is busy (another process writes, or this process's thread
connection is inside a transaction) ``BEGIN`` fails at once and the write takes the thread, which
waits for the file as before.  Nothing here ever waits for a lock on the loop's thread.

What must not run on the loop never does: this connection never checkpoints
(``wal_autocheckpoint=0``: copying the WAL into the database would stall the loop for
milliseconds); one small write in :data:`THREAD_EVERY` takes the thread's connection anyway,
whose automatic checkpoint then keeps the WAL bounded.  Durability is the same as the thread's
(WAL, ``synchronous=NORMAL``, set on this connection too: both are per connection).  A
``:memory:`` store has none (a second connection would be another database), nor does a file
that is not in WAL mode (a write there would block readers).
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite

SMALL_BYTES = 16 * 1024  # a write's payload up to this size may be made on the loop's thread
THREAD_EVERY = 64  # one small write in this many goes to the thread (its connection checkpoints)


class Inline:
    """The loop thread's connection to one store's file."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.count = 0

    def write(self, work: Callable[[sqlite3.Connection], Any]) -> tuple[bool, Any]:
        """``(True, result)``: ``work`` committed here; ``(False, None)``: not made (the file
        is busy, or it is the thread's turn), to be made on the thread."""
        self.count += 1
        if self.count % THREAD_EVERY == 0:
            return False, None
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return False, None
            raise
        try:
            out = work(conn)
            conn.commit()
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        return True, out


_INLINE: weakref.WeakKeyDictionary[aiosqlite.Connection, Inline] = weakref.WeakKeyDictionary()


def _open(path: Path) -> sqlite3.Connection | None:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout=0")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        mode = conn.execute("PRAGMA journal_mode").fetchone()
    except BaseException:
        conn.close()
        raise
    if not mode or str(mode[0]).lower() != "wal":
        conn.close()
        return None
    return conn


async def attach(db: aiosqlite.Connection, path: Path) -> None:
    """Give ``db`` (a store's connection to the file ``path``) its loop-thread connection."""
    conn = await asyncio.to_thread(_open, path)
    if conn is not None:
        _INLINE[db] = Inline(conn)


def detach(db: aiosqlite.Connection) -> None:
    """Close ``db``'s loop-thread connection, if it has one."""
    inline = _INLINE.pop(db, None)
    if inline is not None:
        inline.conn.close()


def of(db: aiosqlite.Connection) -> Inline | None:
    return _INLINE.get(db)
