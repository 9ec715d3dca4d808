"""A test worker on the machine's signal hub: a :class:`MachineSignals` connected to the hub at
``path`` and listening in a task of its own (the tests of the hub, its asks and the key changes
run two or three of them in one process)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self

from app.engine.machine_signals import MachineSignals


class SignalsWorker:
    """``start`` connects and listens (cancels and cooldowns to :meth:`on_cancel` /
    :meth:`on_cooldown`), returning once :meth:`ready`; ``stop`` ends the task and closes."""

    def __init__(self, path: str) -> None:
        self.signals = MachineSignals(path)
        self.task: asyncio.Task[None] | None = None

    def on_cancel(self, run_id: str) -> None:
        """A cancel heard (nothing by default)."""

    def on_cooldown(self, url: str, seconds: float) -> None:
        """An upstream cooldown heard (nothing by default)."""

    def ready(self) -> bool:
        """Connected enough for the test to go on (the link is up, by default)."""
        return True

    async def start(self) -> Self:
        self.task = asyncio.get_running_loop().create_task(
            self.signals.listen(self.on_cancel, self.on_cooldown))
        for _ in range(200):
            link = self.signals._link
            if link is not None and link.alive and self.ready():
                return self
            await asyncio.sleep(0.01)
        raise AssertionError("not connected")

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.signals.close()
