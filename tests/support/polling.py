"""Waiting in tests for state another task changes (a background worker, a store)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], *, seconds: float = 10.0,
                every: float = 0.02) -> T:
    """``await probe()`` every ``every`` seconds until ``ok`` of its value; that value.  Past
    ``seconds`` an AssertionError names the last value seen."""
    value = await probe()
    for _ in range(int(seconds / every)):
        if ok(value):
            return value
        await asyncio.sleep(every)
        value = await probe()
    raise AssertionError(f"not reached within {seconds} s; last seen: {value!r}"[:2000])
