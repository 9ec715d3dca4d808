"""Signals between replicas about runs in flight: "cancel run X" wherever X runs, and a
background run's events for readers on other replicas (:class:`RedisMirror`,
:class:`RemoteReader`).

A run lives in the memory of the process that started it (:attr:`Engine.runs`); a cancel that
lands on another replica is published, and every replica's listener cancels the run if it is
one of its own.  :class:`LocalSignals` (one process) publishes nowhere; :class:`RedisSignals`
uses a Redis pub/sub channel (``[redis] url``); the workers of ``serve --workers N`` without
Redis use the machine's signal hub (:mod:`app.engine.machine_signals`).  Delivery is at most once and only to
replicas listening at that moment: the caller confirms the effect in the store (the run's
owner writes ``cancelled`` when its run ends) and a dead owner's run is found by its stale
heartbeat (``run_lost``).  Redis unreachable is never a 500 or a cut stream: :meth:`cancel`
raises :class:`SignalsUnavailable` (503 ``signals_unavailable``), and the Responses API then
records the cancel in the store, where the owner's heartbeat reads it
(:func:`app.api.responses.following.cancel_elsewhere`); a reader goes on from the store.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from app.core.errors import GatewayError, Overloaded

log = logging.getLogger("ocm_gateway")
Json = dict[str, Any]
CHANNEL = "ocm:runs:cancel"
COOLDOWNS = "ocm:upstream:cooldown"  # {"url", "seconds"}: an upstream replica found failing


def redis_errors() -> tuple[type[BaseException], ...]:
    """What a Redis call raises when Redis cannot be reached or answer (never a 500)."""
    from redis.exceptions import RedisError

    return (RedisError, OSError)


class SignalsUnavailable(Overloaded):
    """Redis, which carries signals between replicas, cannot be reached: 503, ``Retry-After``."""

    code = "signals_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=1.0)


class Settle(Protocol):
    """Where a :class:`RemoteReader` learns a run's end without Redis (the store): ``ended``
    gives the payloads after sequence number ``after`` once the store records the run's end
    (or its loss: a dead owner), else None; ``error`` is the event a reader ends with when it
    must stop following a run that has not ended (neither Redis nor the store answering, or
    this replica shutting down): the run goes on, and can be followed again."""

    async def ended(self, after: int | None) -> list[Json] | None: ...

    def error(self, after: int | None, reason: GatewayError) -> list[Json]: ...


class Signals(Protocol):
    shared: bool  # whether another replica can hear a signal

    async def cancel(self, run_id: str) -> None:
        """Publish a cancel; :class:`SignalsUnavailable` when it cannot be sent."""
        ...

    def follow(self, run_id: str, after: int | None, settle: Settle) -> RemoteReader:
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

    def follow(self, run_id: str, after: int | None, settle: Settle) -> RemoteReader:
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
        try:
            await self._redis.publish(CHANNEL, run_id)
        except redis_errors() as exc:
            raise SignalsUnavailable(f"The cancel cannot reach the replica running {run_id!r}: "
                                     f"Redis is unavailable ({type(exc).__name__}); try again.",
                                     ) from None

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

    def follow(self, run_id: str, after: int | None, settle: Settle) -> RemoteReader:
        return RemoteReader(self._redis, run_id, after, settle)

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
    hour after the end.  Losing Redis loses only the copy (the rest of it is dropped, not
    queued): the owner keeps serving, and readers elsewhere learn the end from the store."""

    def __init__(self, client: Any, run_id: str) -> None:
        self._redis = client
        self.key = f"ocm:events:{run_id}"
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._broken = False
        self._task = asyncio.get_running_loop().create_task(self._pump())

    def push(self, payload: Json) -> None:
        if not self._broken:
            self._queue.put_nowait(orjson.dumps(payload))

    def end(self) -> None:
        if not self._broken:
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
            self._broken = True
            while not self._queue.empty():
                self._queue.get_nowait()
            log.warning("run events: copying to Redis stopped (%s)", type(exc).__name__)


class RemoteReader:
    """Follow a run that another replica owns from its Redis stream: the payloads with a
    sequence number above ``after``, then live ones until its end marker (the same interface
    as :class:`~app.engine.replay.ReplayReader`).  The stream holds every payload since the
    run started, so a reader joining at any point sees no gap and no duplicate.

    Whenever the stream is quiet for ``check_seconds`` or Redis fails, the store is asked
    (``settle``): once it records the run's end — stored by the owner, or ``run_lost`` when the
    owner died (its heartbeat stopped) — the reader ends with the stored payloads it has not
    sent, whose last is the terminal event.  Redis errors never end a stream early; neither
    source answering for ``give_up_seconds`` ends it with ``settle.error``, as does shutdown."""

    def __init__(self, client: Any, run_id: str, after: int | None, settle: Settle, *,
                 check_seconds: float = 1.0, give_up_seconds: float = 60.0) -> None:
        self._redis = client
        self._key = f"ocm:events:{run_id}"
        self._after = after  # the last sequence number the client has
        self._last = "0-0"
        self._done = False
        self._settle = settle
        self._check = check_seconds
        self._give_up = give_up_seconds
        self._stopped: GatewayError | None = None
        self._failing: set[str] = set()  # the sources failing now (logged once per outage)

    def frames(self) -> RemoteReader:
        return self

    def batched(self) -> RemoteReader:
        return self

    def __aiter__(self) -> RemoteReader:
        return self

    async def __anext__(self) -> list[Json]:
        loop = asyncio.get_running_loop()
        checked = heard = loop.time()  # the store last asked; either source last answered
        while not self._done:
            batch, redis_ok = await self._read()
            if redis_ok:
                heard = loop.time()
            if batch:
                return batch
            if self._done:
                break
            if redis_ok and loop.time() - checked < self._check:
                continue
            checked = loop.time()
            rest, store_ok = await self._stored_end()
            if rest is not None:
                self._done = True
                if rest:
                    return rest
                break
            if store_ok:
                heard = loop.time()
            elif loop.time() - heard >= self._give_up:
                self._done = True
                return self._settle.error(self._after, SignalsUnavailable(
                    "Neither Redis nor the store can be read: this response cannot be followed "
                    "here now; follow it again later."))
            if not redis_ok:
                await asyncio.sleep(min(self._check, 0.5))
        if self._stopped is not None:  # shutdown: say why the stream ends before the run does
            reason, self._stopped = self._stopped, None
            return self._settle.error(self._after, reason)
        raise StopAsyncIteration

    async def _read(self) -> tuple[list[Json], bool]:
        """The next payloads from Redis (blocking up to the check interval), and whether Redis
        answered."""
        try:
            answer = await self._redis.xread({self._key: self._last}, count=512,
                                             block=max(1, int(self._check * 1000)))
        except redis_errors() as exc:
            if "redis" not in self._failing:  # once per outage, not every retry
                self._failing.add("redis")
                log.warning("run events: reading %s from Redis failed (%s); asking the store",
                            self._key, type(exc).__name__)
            return [], False
        self._failing.discard("redis")
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
                    if isinstance(seq, int):
                        self._after = seq
        return batch, True

    async def _stored_end(self) -> tuple[list[Json] | None, bool]:
        """``settle.ended``, and whether the store answered."""
        try:
            rest = await self._settle.ended(self._after)
        except Exception as exc:  # the store is away too: keep trying both
            if "store" not in self._failing:
                self._failing.add("store")
                log.warning("run events: the store did not answer for %s (%s)", self._key,
                            type(exc).__name__)
            return None, False
        self._failing.discard("store")
        return rest, True

    async def aclose(self) -> None:
        self._done = True

    def stop(self, reason: GatewayError) -> None:
        """This replica is shutting down: end the stream (the run goes on elsewhere)."""
        self._done = True
        self._stopped = reason
