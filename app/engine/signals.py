"""Signals between replicas about runs in flight: "cancel run X" wherever X runs, and a
background run's events for readers on other replicas (:class:`RedisMirror`,
:class:`RemoteReader`).

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
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import orjson

log = logging.getLogger("ocm_gateway")
Json = dict[str, Any]
CHANNEL = "ocm:runs:cancel"
COOLDOWNS = "ocm:upstream:cooldown"  # {"url", "seconds"}: an upstream replica found failing


class Signals(Protocol):
    shared: bool  # whether another replica can hear a signal

    async def cancel(self, run_id: str) -> None: ...

    def follow(self, run_id: str, after: int | None) -> RemoteReader:
        """A reader of another replica's run (only when ``shared``)."""
        ...

    async def listen(self, on_cancel: Callable[[str], None],
                     on_cooldown: Callable[[str, float], None] | None = None) -> None:
        """Run until cancelled, calling ``on_cancel(run_id)`` for every cancel heard (and
        ``on_cooldown(url, seconds)`` for every upstream cooldown another replica started)."""
        ...


class LocalSignals:
    shared = False

    async def cancel(self, run_id: str) -> None:
        return None

    def follow(self, run_id: str, after: int | None) -> RemoteReader:
        raise RuntimeError("no other replica to follow")

    async def listen(self, on_cancel: Callable[[str], None],
                     on_cooldown: Callable[[str, float], None] | None = None) -> None:
        await asyncio.Event().wait()


class RedisSignals:
    shared = True

    def __init__(self, client: Any) -> None:
        self._redis = client
        self._pending: set[asyncio.Task[None]] = set()
        self.origin = uuid.uuid4().hex  # this process: its own cooldowns are not applied twice

    async def cancel(self, run_id: str) -> None:
        await self._redis.publish(CHANNEL, run_id)

    def cooldown(self, url: str, seconds: float) -> None:
        """Tell the other replicas (from a task: called where a request is failing over)."""
        message = orjson.dumps({"url": url, "seconds": seconds, "origin": self.origin})

        async def publish() -> None:
            try:
                await self._redis.publish(COOLDOWNS, message)
            except Exception as exc:  # best effort: each replica still learns on its own
                log.warning("upstream cooldown not shared (%s)", type(exc).__name__)

        task = asyncio.get_running_loop().create_task(publish())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def mirror(self, run_id: str) -> RedisMirror:
        return RedisMirror(self._redis, run_id)

    def follow(self, run_id: str, after: int | None) -> RemoteReader:
        return RemoteReader(self._redis, run_id, after)

    async def listen(self, on_cancel: Callable[[str], None],
                     on_cooldown: Callable[[str, float], None] | None = None) -> None:
        while True:  # reconnects after Redis went away
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL, COOLDOWNS)
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        data, channel = message["data"], message.get("channel")
                        channel = channel.decode() if isinstance(channel, bytes) else channel
                        if channel == COOLDOWNS:
                            cool = orjson.loads(data)
                            if on_cooldown is not None and cool.get("origin") != self.origin:
                                on_cooldown(str(cool["url"]), float(cool["seconds"]))
                        else:
                            on_cancel(data.decode() if isinstance(data, bytes) else str(data))
            except Exception as exc:  # Redis went away: listen again soon
                log.warning("run signals: Redis listener stopped (%s); retrying", type(exc).__name__)
                await asyncio.sleep(1.0)


_END = b"end"
_LOG_TTL = 3600  # a run's event copy outlives its end by an hour (late readers use the store)


class RedisMirror:
    """A background run's payloads copied, in order, to the Redis stream ``ocm:events:{id}``
    (one task per run pipelines the ``XADD`` s), then an end marker; the stream expires an
    hour after the end.  Losing Redis loses only the copy: the owner keeps serving, and readers
    elsewhere get the events from the store once the run has ended."""

    def __init__(self, client: Any, run_id: str) -> None:
        self._redis = client
        self.key = f"ocm:events:{run_id}"
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._pump())

    def push(self, payload: Json) -> None:
        self._queue.put_nowait(orjson.dumps(payload))

    def end(self) -> None:
        self._queue.put_nowait(None)

    async def _pump(self) -> None:
        ended = False
        try:
            while not ended:
                batch = [await self._queue.get()]
                while not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                pipe = self._redis.pipeline(transaction=False)
                for item in batch:
                    if item is None:
                        ended = True
                        pipe.xadd(self.key, {"end": _END})
                        pipe.expire(self.key, _LOG_TTL)
                        break
                    pipe.xadd(self.key, {"e": item})
                await pipe.execute()
        except Exception as exc:  # the copy is best effort (see the class docstring)
            log.warning("run events: copying to Redis stopped (%s)", type(exc).__name__)


class RemoteReader:
    """Follow a run that another replica owns from its Redis stream: the payloads with a
    sequence number above ``after``, then live ones until its end marker (the same interface
    as :class:`~app.engine.replay.ReplayReader`).  The stream holds every payload since the
    run started, so a reader joining at any point sees no gap and no duplicate."""

    def __init__(self, client: Any, run_id: str, after: int | None, *, idle_seconds: float = 30.0) -> None:
        self._redis = client
        self._key = f"ocm:events:{run_id}"
        self._after = after
        self._last = "0-0"
        self._done = False
        self._idle = idle_seconds

    def frames(self) -> RemoteReader:
        return self

    def batched(self) -> RemoteReader:
        return self

    def __aiter__(self) -> RemoteReader:
        return self

    async def __anext__(self) -> list[Json]:
        waited = 0.0
        while not self._done:
            answer = await self._redis.xread({self._key: self._last}, count=512, block=1000)
            batch: list[Json] = []
            for _, entries in answer or []:
                for entry_id, fields in entries:
                    self._last = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    if b"end" in fields or "end" in fields:
                        self._done = True
                        break
                    payload = orjson.loads(fields.get(b"e") or fields.get("e"))
                    seq = payload.get("sequence_number")
                    if self._after is None or not isinstance(seq, int) or seq > self._after:
                        batch.append(payload)
            if batch:
                return batch
            if not answer:
                waited += 1.0
                if waited >= self._idle:  # the owner went quiet for too long: stop following
                    self._done = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._done = True

    def stop(self, reason: Exception) -> None:
        self._done = True
