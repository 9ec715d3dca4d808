"""Usage accounting per key × model × hour and day, and the budgets it enforces.

:class:`UsageRecorder` counts each finished request in memory (a dict update: no store round
trip on the hot path) and writes the counts to the store every ``[usage] flush_seconds``, on
shutdown, and early when ``MAX_PENDING`` rows wait.  A flush that fails keeps its rows for
the next one (up to the bound; beyond it the oldest are dropped, with a warning).  A crash
loses at most the last ``flush_seconds`` of counts.  Hourly rows older than
``[usage] hourly_days`` are deleted (the daily ones are kept).

:class:`Budgets` checks a key's spend in its budget period before a generation: the spend the
store holds (read at most every ``[usage] budget_refresh_seconds`` per key) plus what this
process has not flushed yet.  Another replica's spend shows here after its next flush and our
next read: a key is stopped on every replica within ``flush_seconds + budget_refresh_seconds``
(7 s by default) of crossing its budget; requests already running are not cut.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

from app.config import ApiKey, UsageSettings
from app.core.errors import InsufficientQuota
from app.stores.accounts import AccountStore, Grain, UsageRow, bucket_start, period_end, period_start

log = logging.getLogger("ocm_gateway")
MAX_PENDING = 50_000


class UsageRecorder:
    def __init__(self, settings: UsageSettings, store: AccountStore | None = None) -> None:
        self.settings = settings
        self.store = store  # set once the stores are open
        self.pending: dict[tuple[Grain, int, str, str], UsageRow] = {}
        self._flushing: list[UsageRow] = []
        self._lock = asyncio.Lock()
        self._wake: asyncio.Event | None = None

    def record(self, key: str, model: str, *, input_tokens: int = 0, cached_tokens: int = 0,
               output_tokens: int = 0, reasoning_tokens: int = 0, tool_rounds: int = 0,
               error_code: str | None = None, seconds: float | None = None, cost: float = 0.0,
               requests: int = 1, now: float | None = None) -> None:
        now = time.time() if now is None else now
        grains: tuple[Grain, Grain] = ("hour", "day")
        for grain in grains:
            ident = (grain, bucket_start(now, grain), key, model)
            row = self.pending.get(ident)
            if row is None:
                row = self.pending[ident] = UsageRow(grain, ident[1], key, model)
            row.requests += requests
            row.input_tokens += input_tokens
            row.cached_tokens += cached_tokens
            row.output_tokens += output_tokens
            row.reasoning_tokens += reasoning_tokens
            row.tool_rounds += tool_rounds
            row.cost += cost
            if error_code is not None:
                row.errors += 1
                row.error_codes[error_code] = row.error_codes.get(error_code, 0) + 1
            if seconds is not None:
                row.observe_latency(seconds)
        if len(self.pending) >= MAX_PENDING and self._wake is not None:
            self._wake.set()

    def unflushed(self, key: str, since: int) -> tuple[int, float]:
        """A key's tokens and cost counted here and not in the store yet (daily rows)."""
        tokens, cost = 0, 0.0
        for row in (*self.pending.values(), *self._flushing):
            if row.grain == "day" and row.key == key and row.bucket >= since:
                tokens += row.input_tokens + row.output_tokens
                cost += row.cost
        return tokens, cost

    async def flush(self) -> None:
        async with self._lock:
            if self.store is None or not self.pending:
                return
            self._flushing, self.pending = list(self.pending.values()), {}
            try:
                await self.store.add_usage(self._flushing)
            except Exception as exc:
                log.warning("usage: flush failed, kept for the next one (%s)", exc)
                for row in self._flushing:  # back in, under what arrived meanwhile
                    mine = self.pending.setdefault(row.ident, row.blank())
                    mine.add(row)
                while len(self.pending) > MAX_PENDING:
                    self.pending.pop(next(iter(self.pending)))
                    log.warning("usage: pending rows over %d, the oldest dropped", MAX_PENDING)
            finally:
                self._flushing = []

    async def run(self) -> None:
        """Flush every ``flush_seconds`` (sooner when full) for the life of the process, and
        drop old hourly rows once an hour."""
        self._wake = asyncio.Event()
        pruned = 0.0
        while True:
            try:
                async with asyncio.timeout(self.settings.flush_seconds):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self.flush()
            if self.store is not None and time.time() - pruned > 3600:
                pruned = time.time()
                try:
                    await self.store.expire_usage("hour", int(pruned - self.settings.hourly_days * 86400))
                except Exception as exc:
                    log.warning("usage: pruning hourly rows failed (%s)", exc)


def cost_of(key: ApiKey | None, model: str, input_tokens: int, output_tokens: int) -> float:
    price = key.prices.get(model) if key is not None else None
    if price is None:
        return 0.0
    return (input_tokens * price.input + output_tokens * price.output) / 1_000_000


class Budgets:
    def __init__(self, recorder: UsageRecorder, refresh_seconds: float) -> None:
        self.recorder = recorder
        self.refresh = refresh_seconds
        self._spent: dict[str, tuple[float, int, int, float]] = {}  # key → read at, since, tokens, cost

    async def check(self, key: ApiKey) -> None:
        """Raise :class:`InsufficientQuota` when ``key`` has spent its budget this period."""
        budget = key.budget
        if budget is None or self.recorder.store is None:
            return
        now = time.time()
        since = period_start(budget.period, now)
        cached = self._spent.get(key.name)
        if cached is None or cached[1] != since or time.monotonic() - cached[0] >= self.refresh:
            tokens, cost = await self.recorder.store.spent(key.name, since)
            cached = self._spent[key.name] = (time.monotonic(), since, tokens, cost)
        local_tokens, local_cost = self.recorder.unflushed(key.name, since)
        tokens, cost = cached[2] + local_tokens, cached[3] + local_cost
        over = ((budget.tokens is not None and tokens >= budget.tokens)
                or (budget.cost is not None and cost >= budget.cost))
        if not over:
            return
        end = period_end(budget.period, now)
        what = (f"{tokens} of {budget.tokens} tokens" if budget.tokens is not None and tokens >= budget.tokens
                else f"a cost of {cost:.4f} of {budget.cost}")
        when = ("It does not reset (a lifetime budget)." if end is None else
                f"It resets at {datetime.fromtimestamp(end, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}.")
        raise InsufficientQuota(f"This API key has used its {budget.period} budget ({what}). {when}")
