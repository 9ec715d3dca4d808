"""Replica selection and failover, shared by the token-id adapters.

* **Least outstanding requests**: each replica counts the generations it is serving;
  a new one goes to the replica with the fewest (ties: list order), skipping replicas
  in cooldown unless every replica is.
* **Affinity**: a request with an affinity key (``prompt_cache_key``, a conversation) goes
  to the key's home replica (rendezvous hashing: the same for every gateway replica, no
  shared state) unless that one is in cooldown or busier than the least busy by more than
  :data:`AFFINITY_SLACK`: its KV cache holds the prefix the key's requests share.
* **Failover before the first byte**: a replica that refuses the connection, answers
  5xx or times out before its first stream event is put in cooldown and the request is
  retried on another one (bounded attempts, exponential backoff).  A pool's ``on_fail`` is
  told of each cooldown, and :meth:`ReplicaPool.cool` applies one learned elsewhere (gateway
  replicas share them through Redis: :mod:`app.engine.signals`).  Nothing is retried
  once an event has been received: by then bytes may already have reached the client.
* **First-byte timeout**: waiting longer than ``first_byte_timeout`` for the first event,
  over all attempts together, is a 504; ``attempt_timeout`` abandons one silent replica
  for the next within that budget.  Idle time between later events is bounded by the
  HTTP client's read timeout.
* **A replica's gate** (optional, :class:`Gate`): the request takes one of the replica's
  slots before anything is sent to it and gives it back once its stream is closed, so a
  bounded replica (llama.cpp: its ``/props`` ``total_slots``) never sees more than its bound;
  the wait is the gate's (its own timeout) and does not count against ``first_byte_timeout``.
  Each :class:`Replica` counts, for its model, the requests waiting at the gate, those that
  left while waiting and those the gate refused (read by ``/metrics``: :mod:`app.metrics`).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from app.core.errors import GatewayError, UpstreamError, UpstreamTimeout


class Gate(Protocol):
    """A bound on the generations in flight to one replica (app.engine.admission.ReplicaGate)."""

    async def acquire(self) -> None: ...

    def release(self, failed: bool = False) -> None:
        """Give the slot back; ``failed``: the replica failed (its bound may have changed)."""
        ...


@dataclass
class Replica:
    """One upstream replica of one backend (a model's pool); its counts are that model's."""

    url: str
    outstanding: int = 0  # asked or waiting at its gate, until the stream is closed
    cooldown_until: float = 0.0
    gate: Gate | None = None
    waiting: int = 0  # at its gate now
    gave_up: int = 0  # left while waiting at its gate (the client went away)
    refused: int = 0  # refused by its gate (its queue full, or no slot within its timeout)


@dataclass
class RetryPolicy:
    max_attempts: int = 3
    backoff: float = 0.05  # seconds before the 2nd attempt; doubles each time
    cooldown: float = 10.0
    first_byte_timeout: float = 120.0  # total, over every attempt
    attempt_timeout: float | None = None  # per attempt (None: whatever the total leaves)


@dataclass
class ReplicaPool:
    urls: list[str]
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    replicas: list[Replica] = field(init=False)
    # told of every cooldown this pool starts (url, seconds): gateway replicas share them
    on_fail: Callable[[str, float], None] | None = None

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("a backend needs at least one base URL")
        self.replicas = [Replica(u.rstrip("/")) for u in self.urls]

    def pick(self, exclude: set[str], affinity: str | None = None) -> Replica:
        now = time.monotonic()
        candidates = [r for r in self.replicas if r.url not in exclude] or self.replicas
        healthy = [r for r in candidates if r.cooldown_until <= now]
        pool = healthy or sorted(candidates, key=lambda r: r.cooldown_until)[:1]
        least = min(pool, key=lambda r: r.outstanding)
        if affinity is not None and len(pool) > 1:
            home = max(pool, key=lambda r: _weight(affinity, r.url))
            if home.outstanding <= least.outstanding + AFFINITY_SLACK:
                return home
        return least

    def fail(self, replica: Replica) -> None:
        replica.cooldown_until = time.monotonic() + self.policy.cooldown
        if self.on_fail is not None:
            self.on_fail(replica.url, self.policy.cooldown)

    def cool(self, url: str, seconds: float) -> None:
        """Another gateway replica found ``url`` failing: skip it here too for ``seconds``."""
        until = time.monotonic() + seconds
        for replica in self.replicas:
            if replica.url == url.rstrip("/") and replica.cooldown_until < until:
                replica.cooldown_until = until


AFFINITY_SLACK = 2  # a key's home replica is left for a less busy one beyond this many more


def _weight(key: str, url: str) -> int:
    """Rendezvous hashing: every gateway replica ranks the upstream replicas of a key the same
    way, with no shared state, and a replica that goes away moves only its own keys."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest(), "big")


def home_of(key: str, urls: list[str]) -> str:
    """The upstream replica a key goes to when every replica is healthy and idle."""
    return max((u.rstrip("/") for u in urls), key=lambda u: _weight(key, u))


def _retryable(exc: GatewayError) -> bool:
    retry = exc.status in (502, 503, 504) and exc.code != "upstream_not_found"
    return isinstance(exc, UpstreamError) and retry


Events = AsyncIterator[dict[str, Any]]


async def failover(pool: ReplicaPool, open_stream: Callable[[str], Events], affinity: str | None = None,
                   ) -> AsyncGenerator[dict[str, Any], None]:
    """Yield the events of ``open_stream(base_url)`` from the first replica that answers.

    ``first_byte_timeout`` bounds the *total* wait for a first event, across every attempt
    and backoff: a request is never retried past it. A replica counts a request as
    outstanding from the moment it is asked until its stream is closed, however that ends
    (first event, error, empty stream, or cancellation when the client has gone)."""
    tried: set[str] = set()
    last: GatewayError | None = None
    deadline = time.monotonic() + pool.policy.first_byte_timeout
    for attempt in range(pool.policy.max_attempts):
        if attempt:
            await anyio.sleep(pool.policy.backoff * 2 ** (attempt - 1))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        replica = pool.pick(tried, affinity)
        tried.add(replica.url)
        replica.outstanding += 1
        gate = replica.gate
        if gate is not None:
            waited = time.monotonic()
            replica.waiting += 1
            try:
                await gate.acquire()  # Overloaded (503) when its queue is full or too slow
            except BaseException as exc:
                replica.outstanding -= 1
                if isinstance(exc, asyncio.CancelledError):
                    replica.gave_up += 1
                elif isinstance(exc, GatewayError):
                    replica.refused += 1
                raise
            finally:
                replica.waiting -= 1
            waited = time.monotonic() - waited
            deadline, remaining = deadline + waited, remaining + waited
        events = open_stream(replica.url)
        started = False
        failed = False
        try:
            try:
                limit = remaining if pool.policy.attempt_timeout is None else min(
                    remaining, pool.policy.attempt_timeout)
                async with asyncio.timeout(limit):  # (anyio's fail_after: ~0.1 ms a request)
                    first = await events.__anext__()
            except TimeoutError:
                raise UpstreamTimeout(f"The backend at {replica.url} sent nothing for "
                                      f"{limit:.3g} s.") from None
            except StopAsyncIteration:
                return
            started = True  # from here on, bytes may have reached the client: never retried
            yield first
            async for event in events:
                yield event
            return
        except GatewayError as exc:
            failed = isinstance(exc, UpstreamError) and exc.status in (502, 503, 504)
            if started or not _retryable(exc):
                raise
            pool.fail(replica)
            last = exc
        finally:
            replica.outstanding -= 1
            try:
                await _close(events)
            finally:
                if gate is not None:
                    gate.release(failed)  # after the close: the replica's slot is free now
    raise last if last is not None else UpstreamTimeout(
        f"No backend replica answered within {pool.policy.first_byte_timeout:g} s.")


async def _close(events: AsyncIterator[dict[str, Any]]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
