"""Giving freed memory back to the operating system.

A WebSocket that held megabytes of waiting messages frees them when it closes, but glibc's
allocator keeps the freed pages (measured: 8 sockets x 16 messages of 0.9 MB raised RSS from
136 to 279 MiB, and it stayed there after every socket closed).  :func:`trim` asks glibc to
return them (``malloc_trim(0)``), off the event loop and at most once a second (closings in
the same second share one trim, made at its end); elsewhere
than glibc it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time
from collections.abc import Callable

_last = 0.0
_pending = False


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _malloc_trim()


async def trim() -> None:
    """Trim now, or a second after the last trim (calls meanwhile share that one)."""
    global _last, _pending
    if _TRIM is None or _pending:
        return
    _pending = True
    try:
        wait = _last + 1.0 - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        _last = time.monotonic()
        await asyncio.to_thread(_TRIM, 0)
    finally:
        _pending = False
