"""Waiting in tests for state another task changes (a background worker, a store)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], *, seconds: float = 10.0,
                every: float = 0.02) -> T:
    """``await probe()`` every ``every`` seconds until ``ok`` of its value; that value.  Past
    ``seconds`` an AssertionError names the last value seen."""
    deadline = time.monotonic() + seconds  # a clock, not a count: a slow probe cannot stretch it
    value = await probe()
    while not ok(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {seconds} s; last seen: {value!r}"[:2000])
        await asyncio.sleep(every)
        value = await probe()
    return value
