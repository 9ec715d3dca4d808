"""Where per-key limits are counted: this process (:class:`LocalCounters`) or Redis, shared by
every replica (:class:`RedisCounters`, ``[redis] url``).

Contract of :class:`Counters` (used by :mod:`app.http.limits`):

* :meth:`Counters.admit` decides and records **atomically**: a request under its key's
  requests-per-minute (and, for a generation, tokens-per-minute and concurrency) is counted
  and, for a generation, takes a concurrency slot named by ``lease``; otherwise the refusal
  says why and when to retry.  Two replicas admitting at once never both take the last slot.
* :meth:`Counters.release` gives the slot back and charges the tokens the request used (in
  this process at once; in Redis from a task of its own: a request's end never waits on it).
* Windows are 60 s, sliding.  A slot of a replica that died is freed after ``lease_seconds``.
* A request no limit applies to (:func:`unlimited`: a key without rpm, and for a generation
  without tpm and concurrency either) is not counted: no work, no entry, no round trip.

:class:`LocalCounters` is also the state of the machine-local service that ``serve --workers N``
runs without Redis (:mod:`app.http.machine_counters`): :meth:`LocalCounters.decide` is the whole
decision, slots may expire (``lease_seconds``), and :meth:`LocalCounters.hold` takes a slot back
after the service restarted.

Redis: one Lua script per call (one round trip; the server's clock, so replicas agree), sorted
sets per key (requests, tokens, slots) that expire when idle.  When Redis cannot be reached
the ``[redis] on_failure`` policy decides: ``open`` admits (uncounted, logged), ``closed``
refuses with 503.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.core.errors import GatewayError, Overloaded

log = logging.getLogger("ocm_gateway")
WINDOW = 60.0


@dataclass(frozen=True, slots=True)
class Budget:
    rpm: int | None
    tpm: int | None
    concurrent: int | None


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after: float, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


def _refusal(kind: int, budget: Budget, retry_after: float) -> RateLimited:
    if kind == 1:
        return RateLimited(f"Rate limit: {budget.rpm} requests per minute.", retry_after)
    if kind == 2:
        return RateLimited(f"Rate limit: {budget.tpm} tokens per minute.", retry_after)
    return RateLimited(f"Too many concurrent requests (limit {budget.concurrent}).", 1.0,
                       code="concurrency_limit_exceeded")


def unlimited(budget: Budget, generation: bool) -> bool:
    """No limit applies: a request without a requests-per-minute limit, and for a generation
    without tokens-per-minute and concurrency limits either.  Such a request is not counted."""
    return budget.rpm is None and (not generation or (budget.tpm is None and budget.concurrent is None))


class Counters(Protocol):
    async def admit(self, who: str, budget: Budget, *, generation: bool, lease: str,
                    ) -> RateLimited | None: ...

    def release(self, who: str, lease: str, tokens: int) -> None:
        """Give ``lease`` back and charge ``tokens`` (done at once, or soon in a task)."""
        ...


@dataclass
class _Usage:
    requests: collections.deque[float] = field(default_factory=collections.deque)
    tokens: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)
    slots: dict[str, float] = field(default_factory=dict)  # lease -> when it expires
    token_total: int = 0

    def prune(self, now: float) -> None:
        while self.requests and self.requests[0] <= now - WINDOW:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW:
            self.token_total -= self.tokens.popleft()[1]

    def live_slots(self, now: float) -> int:
        """Slots held, once the expired ones are dropped (only looked at when at the limit)."""
        for lease in [lease for lease, until in self.slots.items() if until <= now]:
            del self.slots[lease]
        return len(self.slots)


SWEEP_EVERY = 4096  # decisions between two sweeps of idle entries


class LocalCounters:
    """This process's counts (one replica; with ``--workers N`` and no Redis, the state of the
    machine's counter service).  ``lease_seconds``: a slot not released within it is freed
    (None: never; one process releases its own)."""

    def __init__(self, lease_seconds: float | None = None) -> None:
        self.usage: dict[str, _Usage] = {}
        self.lease_seconds = lease_seconds
        self._decisions = 0

    def decide(self, who: str, budget: Budget, generation: bool, lease: str) -> tuple[int, float] | None:
        """Admit and record (None), or the refusal's kind (1 rpm, 2 tpm, 3 concurrency) and
        seconds to wait; atomic, since nothing here awaits."""
        self._decisions += 1
        now = time.monotonic()
        if self._decisions % SWEEP_EVERY == 0:
            self.sweep(now)
        usage = self.usage.get(who)
        if usage is None:
            usage = self.usage[who] = _Usage()
        usage.prune(now)
        if budget.rpm is not None and len(usage.requests) >= budget.rpm:
            return 1, usage.requests[0] + WINDOW - now
        if generation:
            if budget.tpm is not None and usage.token_total >= budget.tpm:
                return 2, usage.tokens[0][0] + WINDOW - now
            if (budget.concurrent is not None and len(usage.slots) >= budget.concurrent
                    and usage.live_slots(now) >= budget.concurrent):
                return 3, 1.0
            usage.slots[lease] = math.inf if self.lease_seconds is None else now + self.lease_seconds
        usage.requests.append(now)
        return None

    async def admit(self, who: str, budget: Budget, *, generation: bool, lease: str) -> RateLimited | None:
        if unlimited(budget, generation):
            return None
        decided = self.decide(who, budget, generation, lease)
        return None if decided is None else _refusal(decided[0], budget, decided[1])

    def release(self, who: str, lease: str, tokens: int) -> None:
        usage = self.usage.get(who)
        if usage is None:  # never counted (no limit applied), or swept since
            return
        usage.slots.pop(lease, None)
        if tokens:
            now = time.monotonic()
            usage.tokens.append((now, tokens))
            usage.token_total += tokens

    def hold(self, who: str, lease: str) -> None:
        """Take ``lease`` again (a worker re-registering its slots after the service restarted)."""
        usage = self.usage.get(who)
        if usage is None:
            usage = self.usage[who] = _Usage()
        now = time.monotonic()
        usage.slots[lease] = math.inf if self.lease_seconds is None else now + self.lease_seconds

    def sweep(self, now: float) -> None:
        """Forget the keys (and client addresses) with nothing in their windows and no slot."""
        for who in list(self.usage):
            usage = self.usage[who]
            usage.prune(now)
            if not usage.requests and not usage.tokens and not usage.live_slots(now):
                del self.usage[who]


# KEYS: requests, tokens, slots.  ARGV: window, rpm, tpm, concurrent (0: none), generation
# (0/1), lease, lease seconds, a unique member.  Returns {0} or {kind, retry_after}.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local rpm = tonumber(ARGV[2])
if rpm > 0 and redis.call('ZCARD', KEYS[1]) >= rpm then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, tostring(tonumber(first[2]) + window - now)}
end
if ARGV[5] == '1' then
  local tpm = tonumber(ARGV[3])
  if tpm > 0 then
    local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    local total = 0
    for i = 1, #entries, 2 do
      total = total + tonumber(string.match(entries[i], '^(%d+):'))
    end
    if total >= tpm then
      return {2, tostring(tonumber(entries[2]) + window - now)}
    end
  end
  local concurrent = tonumber(ARGV[4])
  if concurrent > 0 and redis.call('ZCARD', KEYS[3]) >= concurrent then
    return {3, '1'}
  end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), ARGV[6])
  redis.call('EXPIRE', KEYS[3], math.ceil(tonumber(ARGV[7])) + 60)
end
redis.call('ZADD', KEYS[1], now, ARGV[8])
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 60)
return {0}
"""
# KEYS: tokens, slots.  ARGV: lease, tokens, window, a unique member.
_RELEASE = """
redis.call('ZREM', KEYS[2], ARGV[1])
local n = tonumber(ARGV[2])
if n > 0 then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[1], tonumber(t[1]) + tonumber(t[2]) / 1000000, ARGV[2] .. ':' .. ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 60)
end
return 0
"""


class CountersUnavailable(Overloaded):
    code = "limits_unavailable"


class RedisCounters:
    """Counts in Redis, shared by every replica (see the module docstring).  A request no limit
    applies to makes no round trip; a release (slot and tokens) is sent only for a generation
    this replica counted (a generation admitted uncounted while Redis was away charges nothing)."""

    def __init__(self, client: Any, *, on_failure: Literal["open", "closed"] = "open",
                 lease_seconds: float = 900.0, prefix: str = "ocm:limits:") -> None:
        self._redis = client
        self._admit = client.register_script(_ADMIT)
        self._release = client.register_script(_RELEASE)
        self.on_failure = on_failure
        self.lease_seconds = lease_seconds
        self.prefix = prefix
        self._pending: set[asyncio.Task[None]] = set()  # releases in flight (strong references)
        self._held: set[str] = set()  # the leases of counted generations, until released

    def _keys(self, who: str) -> tuple[str, str, str]:
        base = f"{self.prefix}{who}"
        return f"{base}:requests", f"{base}:tokens", f"{base}:slots"

    async def admit(self, who: str, budget: Budget, *, generation: bool, lease: str) -> RateLimited | None:
        from redis.exceptions import RedisError

        if unlimited(budget, generation):  # not counted: no round trip, now or at its release
            return None
        try:
            answer = await self._admit(keys=list(self._keys(who)), args=[
                WINDOW, budget.rpm or 0, budget.tpm or 0, budget.concurrent or 0, 1 if generation else 0,
                lease, self.lease_seconds, uuid.uuid4().hex])
        except asyncio.CancelledError:
            if generation:  # the script may have taken the slot before the client left
                self._held.add(lease)
                self.release(who, lease, 0)
            raise
        except (RedisError, OSError) as exc:
            if self.on_failure == "closed":
                raise CountersUnavailable(f"The limits store (Redis) is unavailable ({type(exc).__name__}).",
                                          retry_after=1.0) from None
            log.warning("limits: Redis unavailable (%s); admitting uncounted (on_failure = open)",
                        type(exc).__name__)
            return None
        kind = int(answer[0])
        if kind == 0:
            if generation:
                self._held.add(lease)
            return None
        return _refusal(kind, budget, float(answer[1]))

    def release(self, who: str, lease: str, tokens: int) -> None:
        if lease not in self._held:  # never counted: no limit applied, or admitted uncounted
            return
        self._held.discard(lease)
        task = asyncio.get_running_loop().create_task(self._give_back(who, lease, tokens))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _give_back(self, who: str, lease: str, tokens: int) -> None:
        from redis.exceptions import RedisError

        _, token_key, slots = self._keys(who)
        try:
            await self._release(keys=[token_key, slots], args=[lease, tokens, WINDOW, uuid.uuid4().hex])
        except (RedisError, OSError) as exc:  # the slot frees itself after lease_seconds
            log.warning("limits: could not release a slot in Redis (%s)", type(exc).__name__)
