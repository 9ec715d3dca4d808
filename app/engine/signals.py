"""Signals between replicas about runs in flight: "cancel run X", wherever X runs.

A run lives in the memory of the process that started it (:attr:`Engine.runs`); a cancel that
lands on another replica is published, and every replica's listener cancels the run if it is
one of its own.  :class:`LocalSignals` (one process) publishes nowhere; :class:`RedisSignals`
uses a Redis pub/sub channel (``[redis] url``).  Delivery is at most once and only to
replicas listening at that moment: the caller confirms the effect in the store (the run's
owner writes ``cancelled`` when its run ends) and a dead owner's run is found by its stale
heartbeat (``run_lost``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("ocm_gateway")
CHANNEL = "ocm:runs:cancel"


class Signals(Protocol):
    shared: bool  # whether another replica can hear a signal

    async def cancel(self, run_id: str) -> None: ...

    async def listen(self, on_cancel: Callable[[str], None]) -> None:
        """Run until cancelled, calling ``on_cancel(run_id)`` for every cancel heard."""
        ...


class LocalSignals:
    shared = False

    async def cancel(self, run_id: str) -> None:
        return None

    async def listen(self, on_cancel: Callable[[str], None]) -> None:
        await asyncio.Event().wait()


class RedisSignals:
    shared = True

    def __init__(self, client: Any) -> None:
        self._redis = client

    async def cancel(self, run_id: str) -> None:
        await self._redis.publish(CHANNEL, run_id)

    async def listen(self, on_cancel: Callable[[str], None]) -> None:
        while True:  # reconnects after Redis went away
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            data = message["data"]
                            on_cancel(data.decode() if isinstance(data, bytes) else str(data))
            except Exception as exc:  # Redis went away: listen again soon
                log.warning("run signals: Redis listener stopped (%s); retrying", type(exc).__name__)
                await asyncio.sleep(1.0)
