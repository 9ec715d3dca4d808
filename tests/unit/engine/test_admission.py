"""Admission control: FIFO slots, a bounded queue, a deadline, and no slot lost to a waiter
that leaves."""

from __future__ import annotations

import asyncio

import pytest

from app.core.errors import Overloaded
from app.engine.admission import Admission


async def test_slots_queue_in_order_and_overflow_is_refused_at_once() -> None:
    adm = Admission(max_inflight=2, max_queue=2, queue_timeout=5)
    await adm.acquire()
    await adm.acquire()
    order: list[int] = []

    async def waiter(n: int) -> None:
        await adm.acquire()
        order.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in (1, 2)]
    await asyncio.sleep(0.01)
    assert adm.queued == 2
    with pytest.raises(Overloaded) as info:
        await adm.acquire()  # queue full: refused without waiting
    assert info.value.status == 503 and info.value.retry_after >= 1
    adm.release()
    adm.release()
    await asyncio.gather(*tasks)
    assert order == [1, 2] and adm.inflight == 2 and adm.queued == 0
    adm.release()
    adm.release()
    assert adm.inflight == 0


async def test_wait_past_the_deadline_is_refused() -> None:
    adm = Admission(max_inflight=1, max_queue=5, queue_timeout=0.05)
    await adm.acquire()
    with pytest.raises(Overloaded):
        await adm.acquire()
    assert adm.queued == 0 and adm.inflight == 1


async def test_a_waiter_that_leaves_gives_up_its_place_and_no_slot_is_lost() -> None:
    adm = Admission(max_inflight=1, max_queue=5, queue_timeout=5)
    await adm.acquire()
    leaving = asyncio.create_task(adm.acquire())
    staying = asyncio.create_task(adm.acquire())
    await asyncio.sleep(0.01)
    leaving.cancel()
    await asyncio.sleep(0)
    adm.release()  # must go to the waiter still there
    await asyncio.wait_for(staying, 1)
    assert adm.inflight == 1 and adm.queued == 0
    # A waiter cancelled in the same instant its slot was handed over passes the slot on.
    handed = asyncio.create_task(adm.acquire())
    await asyncio.sleep(0.01)
    adm.release()
    handed.cancel()
    try:
        await handed
    except asyncio.CancelledError:
        pass  # it left: the slot went back
    else:
        adm.release()  # Python's wait_for kept the result over the cancel: the slot is its own
    assert adm.inflight == 0 and adm.queued == 0
