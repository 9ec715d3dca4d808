"""Big lists freed in pieces (app/core/shed.py): off the event loop's thread, a piece at a
time, whatever else still holds the containers."""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar

from app.core import shed as shed_module
from app.core.shed import PIECE, shed, shed_later


class Item:
    """Counts the items alive and records the thread each is freed on."""

    freed: ClassVar[list[int]] = []
    alive = 0

    def __init__(self) -> None:
        Item.alive += 1

    def __del__(self) -> None:
        Item.alive -= 1
        Item.freed.append(threading.get_ident())


def test_shed_empties_a_list_a_piece_at_a_time() -> None:
    Item.freed.clear()
    items = [Item() for _ in range(3 * PIECE + 5)]
    steps: list[int] = []

    class Watched(list[Item]):
        def __delitem__(self, key: slice) -> None:  # type: ignore[override]
            steps.append(len(self[key]))
            super().__delitem__(key)

    watched = Watched(items)
    del items
    shed(watched)
    assert watched == [] and Item.alive == 0
    assert steps == [PIECE, PIECE, PIECE, 5]


async def test_shed_later_frees_the_items_in_a_worker_thread_once_the_caller_dropped_them() -> None:
    Item.freed.clear()
    items = [Item() for _ in range(2 * PIECE)]
    messages = tuple(Item() for _ in range(10))
    shed_later(items, messages)
    del items, messages  # the caller's own references go first: on the loop, nothing is freed
    assert Item.alive == 2 * PIECE + 10
    await asyncio.gather(*shed_module._RUNNING)
    assert Item.alive == 0
    assert len(Item.freed) == 2 * PIECE + 10 and threading.get_ident() not in Item.freed
    assert not shed_module._RUNNING
