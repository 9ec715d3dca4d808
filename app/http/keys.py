"""API keys from the store (made through ``/admin/keys``), as the auth middleware sees them.

A request's key digest that is not a config-file key is looked up in the store and the answer
(a key, a revoked one, or nothing) is cached for ``[auth] key_cache_seconds`` (default 5 s): a
burst of requests with one key costs one store read.  Concurrent lookups of one digest share
one read; the cache is bounded (least recently used out), so random keys cannot fill memory.
An expired key is refused at once (its expiry is in the cached record).

A change made through ``/admin/keys`` (revoke, rotate, update: :meth:`KeyResolver.changed`)
is forgotten here at once and told to the other processes before the admin call returns
(:func:`share_changes`): the other workers of ``serve --workers N`` through the machine's
signal hub (each confirms it forgot the key: :mod:`app.engine.machine_asks`), every replica and
worker through the Redis channel :data:`CHANNEL` when ``[redis] url`` is set.  So a revoked key
is refused on the next request whichever worker takes it.  Only when that channel is down
(the hub restarting, Redis away; logged), or for a change made elsewhere (``ocm-gateway keys``
on the store, or replicas sharing PostgreSQL without Redis), does the cache's age bound it:
refused everywhere within ``key_cache_seconds``.  A process that (re)connects to the channel
forgets every cached key, since it may have missed a change meanwhile.  A lookup that was
reading the store when a change arrived answers its waiting requests but is not cached.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.config import ApiKey
from app.engine.machine_signals import MachineSignals
from app.stores.accounts import AccountStore

log = logging.getLogger("ocm_gateway")
MAX_CACHED = 10_000
CHANNEL = "ocm:keys:changed"  # Redis pub/sub: a JSON list of key digests changed in the store
ASK_SECONDS = 1.0  # how long a change waits for the other workers' confirmation
Publish = Callable[[list[str]], Awaitable[None]]


def key_of(record: dict[str, Any]) -> ApiKey | None:
    """The :class:`ApiKey` a stored record stands for (named by its id: its tenant), or None
    when it is revoked."""
    if record.get("revoked_at") is not None:
        return None
    return ApiKey(name=record["id"], sha256=record["sha256"], models=record.get("models"),
                  requests_per_minute=record.get("requests_per_minute"),
                  tokens_per_minute=record.get("tokens_per_minute"),
                  max_concurrent=record.get("max_concurrent"), budget=record.get("budget"),
                  prices=record.get("prices") or {}, expires_at=record.get("expires_at"))


class KeyResolver:
    def __init__(self, store: AccountStore | None, ttl: float) -> None:
        self.store = store  # set once the stores are open (the app's lifespan)
        self.ttl = ttl
        self.publish: Publish | None = None  # tells the other processes (share_changes)
        self._cache: collections.OrderedDict[str, tuple[float, ApiKey | None]] = collections.OrderedDict()
        self._pending: dict[str, asyncio.Future[ApiKey | None]] = {}
        self._changes = 0  # bumped by every change heard: a read begun before one is not cached

    async def find(self, digest: str) -> ApiKey | None:
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self.ttl:
            self._cache.move_to_end(digest)
            return hit[1]
        if self.store is None:
            return None
        pending = self._pending.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[ApiKey | None] = asyncio.get_running_loop().create_future()
        self._pending[digest] = future
        changes = self._changes
        try:
            record = await self.store.key_by_hash(digest)
            key = key_of(record) if record is not None else None
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            if self._pending.get(digest) is future:
                del self._pending[digest]
        future.set_result(key)
        if changes == self._changes:  # no change arrived while the store was read
            self._cache[digest] = (now, key)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return key

    def forget(self, digests: list[str] | None) -> None:
        """Drop these digests (None: every one) from the cache, and keep a lookup in flight
        from caching what it read before the change."""
        self._changes += 1
        if digests is None:
            self._cache.clear()
            self._pending.clear()
            return
        for digest in digests:
            self._cache.pop(digest, None)
            self._pending.pop(digest, None)

    async def changed(self, digests: list[str]) -> None:
        """These keys were changed in the store by this process: forgotten here, then in every
        other process :func:`share_changes` reaches (returns once they have, or the channel
        failed: logged, the cache's age then bounds it).  Never raises for the channel."""
        self.forget(digests)
        if self.publish is None:
            return
        try:
            await self.publish(digests)
        except Exception as exc:
            log.warning("keys: a key change could not be told to the other workers or replicas "
                        "(%s); they refuse or update it within [auth] key_cache_seconds (%g s)",
                        type(exc).__name__, self.ttl)


class RedisKeyChanges:
    """Key changes between every replica and worker sharing ``[redis] url``: a pub/sub
    channel (:data:`CHANNEL`, a JSON list of digests)."""

    def __init__(self, client: Any) -> None:
        self._redis = client

    async def publish(self, digests: list[str]) -> None:
        await self._redis.publish(CHANNEL, orjson.dumps(digests))

    async def listen(self, on_change: Callable[[list[str] | None], None]) -> None:
        """Until cancelled: every change heard to ``on_change`` (None once subscribed, again
        after Redis came back: what changed meanwhile was not heard)."""
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    on_change(None)
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            digests = orjson.loads(message["data"])
                            if isinstance(digests, list):
                                on_change([str(d) for d in digests])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: subscribe again soon
                log.warning("keys: the Redis listener for key changes stopped (%s); retrying",
                            type(exc).__name__)
                await asyncio.sleep(1.0)


def share_changes(resolver: KeyResolver, signals: object, redis: Any | None) -> asyncio.Task[None] | None:
    """Wire ``resolver`` to the other processes: Redis when configured, else the machine's
    signal hub (``serve --workers N``), else nothing (one process).  The listener task to
    cancel at shutdown, if one was started."""
    if redis is not None:
        channel = RedisKeyChanges(redis)
        resolver.publish = channel.publish
        return asyncio.get_running_loop().create_task(channel.listen(resolver.forget))
    if isinstance(signals, MachineSignals):
        signals.asks.handlers["keys"] = lambda args: resolver.forget([str(d) for d in args[0]])
        signals.asks.on_link.append(lambda: resolver.forget(None))

        async def publish(digests: list[str]) -> None:
            answered, asked = await signals.everywhere(["keys", digests], within=ASK_SECONDS)
            if answered < asked:
                log.warning("keys: %d of %d other workers did not confirm a key change within "
                            "%g s; they refuse or update it within [auth] key_cache_seconds",
                            asked - answered, asked, ASK_SECONDS)

        resolver.publish = publish
    return None
