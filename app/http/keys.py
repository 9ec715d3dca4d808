"""API keys from the store (made through ``/admin/keys``), as the auth middleware sees them.

A request's key digest that is not a config-file key is looked up in the store and the answer
(a key, a revoked one, or nothing) is cached for ``[auth] key_cache_seconds`` (default 5 s):
so a key revoked or changed on any replica is refused everywhere within that time, and a
burst of requests with one key costs one store read.  Concurrent lookups of one digest share
one read; the cache is bounded (least recently used out), so random keys cannot fill memory.
An expired key is refused at once (its expiry is in the cached record).
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from app.config import ApiKey
from app.stores.accounts import AccountStore

MAX_CACHED = 10_000


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
        self._cache: collections.OrderedDict[str, tuple[float, ApiKey | None]] = collections.OrderedDict()
        self._pending: dict[str, asyncio.Future[ApiKey | None]] = {}

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
            del self._pending[digest]
        future.set_result(key)
        self._cache[digest] = (now, key)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return key

    def forget(self, digest: str) -> None:
        """This process changed the key: do not wait for the cache to expire."""
        self._cache.pop(digest, None)
