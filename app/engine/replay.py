"""A resumable run's event log, for readers that come and go.

A background run keeps every payload its encoder produced, in order (:class:`Replay`).  A
reader (:meth:`Replay.reader`) gets the ones after a sequence number, then follows the run
live until its end; several readers can follow one run, and a reader that leaves does not
cancel it (the run is a background one: it outlives every connection).  Once the run has
ended, its log is persisted with the response, and a :class:`Replay` rebuilt from the stored
payloads (:meth:`Replay.finished`) serves late readers the same way.

The log is a list of the already-encoded payloads: what a reader gets is byte for byte what
a live client got, sequence numbers included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from app.core.errors import GatewayError

Json = dict[str, Any]


class Mirror(Protocol):
    def push(self, payload: Json) -> None: ...

    def end(self) -> None: ...


def _seq(payload: Json) -> int:
    seq = payload.get("sequence_number")
    return seq if isinstance(seq, int) else -1


class Replay:
    """The payloads of one run so far, and the readers following it."""

    def __init__(self, events: list[Json] | None = None, *, ended: bool = False) -> None:
        self.events: list[Json] = events if events is not None else []
        self.ended = ended
        self._readers: set[asyncio.Queue[Json | None]] = set()
        self.mirror: Mirror | None = None  # a copy for readers on other replicas (signals.py)

    @classmethod
    def finished(cls, events: list[Json]) -> Replay:
        return cls(events, ended=True)

    def push(self, payload: Json) -> None:
        self.events.append(payload)
        for queue in self._readers:
            queue.put_nowait(payload)
        if self.mirror is not None:
            self.mirror.push(payload)

    def end(self) -> None:
        self.ended = True
        if self.mirror is not None:
            self.mirror.end()
        for queue in self._readers:
            queue.put_nowait(None)
        self._readers.clear()

    def reader(self, after: int | None = None,
               stop: Callable[[GatewayError], None] | None = None) -> ReplayReader:
        """The payloads with a sequence number above ``after`` (all with None), then the
        live ones until the end."""
        queue: asyncio.Queue[Json | None] = asyncio.Queue()
        for payload in self.events:
            if after is None or _seq(payload) > after:
                queue.put_nowait(payload)
        if self.ended:
            queue.put_nowait(None)
        else:
            self._readers.add(queue)
        return ReplayReader(self, queue, stop)

    def _leave(self, queue: asyncio.Queue[Json | None]) -> None:
        self._readers.discard(queue)


class ReplayReader:
    """One reader: streamable by the http layer (``frames().batched()``), each batch what is
    ready at once; ``stop`` (shutdown) is passed to the run while it is in flight."""

    def __init__(self, replay: Replay, queue: asyncio.Queue[Json | None],
                 stop: Callable[[GatewayError], None] | None) -> None:
        self._replay = replay
        self._queue = queue
        self._stop = stop
        self._done = False

    @property
    def ended(self) -> bool:
        """The run's end was taken: nothing follows the batch just returned."""
        return self._done

    def frames(self) -> ReplayReader:
        return self

    def batched(self) -> ReplayReader:
        return self

    def __aiter__(self) -> ReplayReader:
        return self

    async def __anext__(self) -> list[Json]:
        if self._done:
            raise StopAsyncIteration
        first = await self._queue.get()
        if first is None:
            self._done = True
            raise StopAsyncIteration
        batch = [first]
        while not self._queue.empty():
            payload = self._queue.get_nowait()
            if payload is None:
                self._done = True
                break
            batch.append(payload)
        return batch

    async def aclose(self) -> None:
        """Leaving does not cancel the run (it is a background one)."""
        self._done = True
        self._replay._leave(self._queue)

    def stop(self, reason: GatewayError) -> None:
        if self._stop is not None and not self._replay.ended:
            self._stop(reason)
