"""What the operator's side keeps: API keys made through ``/admin/keys`` and usage per key.

Implementations: :mod:`.sqlite_accounts` (the embedded default, the responses' SQLite file),
:mod:`.postgres_accounts` (``[store] url``: every replica sees the same keys and usage) and
:mod:`.memory_accounts` (tests).  ``tests/unit/stores/test_accounts_contract.py`` runs the same
scenarios on each.

Contract:

* **Keys** are JSON records (``id``, ``sha256`` of the secret, ``name``, ``owner``, limits,
  ``budget``, ``prices``, ``expires_at``, ``metadata``, ``revoked_at``, ...; the secret itself is
  never given to a store).  ``put_key`` creates or replaces the record with that id (an update,
  a revocation and a rotation are all a ``put``); the ``sha256`` is unique across records (a
  ``put`` that would share one raises ``ValueError``).  ``key_by_hash`` finds a record by the
  digest of the secret a request showed, revoked ones included (the caller decides).
* **Usage** is counted in :class:`UsageRow` s keyed by (grain ``hour``/``day``, bucket start
  in Unix seconds, key, model).  ``add_usage`` *adds* rows to what is there (atomically per
  call: N replicas flushing at once lose nothing); ``usage`` reads rows back in a time range;
  ``spent`` is a key's tokens and cost from a time on (its ``day`` rows); ``expire_usage``
  deletes rows of a grain older than a time.
* Failures of the store itself raise (the HTTP layer answers 503), never "missing".
"""

from __future__ import annotations

import bisect
import calendar
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Json = dict[str, Any]
Grain = Literal["hour", "day"]
# Request latency histogram bounds (milliseconds); the last bucket is everything above.
LATENCY_MS: tuple[float, ...] = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000,
                                 60_000, 120_000, 300_000)
GRAIN_SECONDS = {"hour": 3600, "day": 86400}


def bucket_start(now: float, grain: Grain) -> int:
    step = GRAIN_SECONDS[grain]
    return int(now // step * step)


@dataclass(slots=True)
class UsageRow:
    grain: Grain
    bucket: int
    key: str
    model: str
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    tool_rounds: int = 0
    cost: float = 0.0
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_MS) + 1))
    error_codes: dict[str, int] = field(default_factory=dict)

    COUNTERS = ("requests", "errors", "input_tokens", "cached_tokens", "output_tokens",
                "reasoning_tokens", "tool_rounds", "cost")

    @property
    def ident(self) -> tuple[Grain, int, str, str]:
        return (self.grain, self.bucket, self.key, self.model)

    def blank(self) -> UsageRow:
        """A row with this one's identity and nothing counted."""
        return UsageRow(self.grain, self.bucket, self.key, self.model)

    def observe_latency(self, seconds: float) -> None:
        self.latency[bisect.bisect_left(LATENCY_MS, seconds * 1000)] += 1

    def add(self, other: UsageRow) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        width = max(len(self.latency), len(other.latency))
        mine = self.latency + [0] * (width - len(self.latency))
        self.latency = [a + b for a, b in zip(mine, other.latency + [0] * (width - len(other.latency)),
                                              strict=True)]
        for code, n in other.error_codes.items():
            self.error_codes[code] = self.error_codes.get(code, 0) + n

    def percentile(self, q: float) -> float | None:
        """The q-quantile (ms) interpolated linearly inside the histogram bucket that holds it,
        as Prometheus' ``histogram_quantile`` does (None: no requests).  The first bucket starts
        at 0; the open last bucket reports its lower bound (nothing is known above it)."""
        total = sum(self.latency)
        if total == 0:
            return None
        rank, seen = q * total, 0
        for i, n in enumerate(self.latency):
            if n and seen + n >= rank:
                if i >= len(LATENCY_MS):
                    return float(LATENCY_MS[-1])
                lower = LATENCY_MS[i - 1] if i else 0.0
                return round(lower + (LATENCY_MS[i] - lower) * max(0.0, rank - seen) / n, 1)
            seen += n
        return float(LATENCY_MS[-1])

    def to_json(self) -> Json:
        body: Json = {"grain": self.grain, "start": self.bucket, "key": self.key, "model": self.model}
        for name in self.COUNTERS:
            body[name] = round(self.cost, 6) if name == "cost" else getattr(self, name)
        body["total_tokens"] = self.input_tokens + self.output_tokens
        body["error_codes"] = dict(self.error_codes)
        body["latency_ms"] = {"p50": self.percentile(0.5), "p95": self.percentile(0.95),
                              "p99": self.percentile(0.99)}
        return body


def period_start(period: str, now: float | None = None) -> int:
    """The start (Unix time) of a budget period holding ``now``: UTC day, UTC month, or 0."""
    now = time.time() if now is None else now
    if period == "day":
        return bucket_start(now, "day")
    if period == "month":
        t = time.gmtime(now)
        return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
    return 0


def period_end(period: str, now: float | None = None) -> int | None:
    """When the period holding ``now`` ends (None: a lifetime budget never resets)."""
    now = time.time() if now is None else now
    if period == "day":
        return bucket_start(now, "day") + 86400
    if period == "month":
        t = time.gmtime(now)
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        return calendar.timegm((year, month, 1, 0, 0, 0))
    return None


class AccountStore(Protocol):
    async def put_key(self, record: Json) -> None: ...

    async def get_key(self, key_id: str) -> Json | None: ...

    async def key_by_hash(self, sha256: str) -> Json | None: ...

    async def list_keys(self) -> list[Json]: ...

    async def add_usage(self, rows: list[UsageRow]) -> None: ...

    async def usage(self, grain: Grain, start: int, end: int, key: str | None = None,
                    model: str | None = None) -> list[UsageRow]: ...

    async def spent(self, key: str, since: int) -> tuple[int, float]: ...

    async def expire_usage(self, grain: Grain, before: int) -> int: ...


def row_columns(row: UsageRow) -> tuple[Any, ...]:
    """A row as the SQL stores keep it: its identity, its counters, then the latency histogram
    and error codes as JSON text."""
    import orjson

    return (*row.ident, *(getattr(row, name) for name in UsageRow.COUNTERS),
            orjson.dumps(row.latency).decode(), orjson.dumps(row.error_codes).decode())


def row_from_columns(values: Any) -> UsageRow:
    import orjson

    grain, bucket, key, model, *rest = values
    counters, latency, codes = rest[:len(UsageRow.COUNTERS)], rest[-2], rest[-1]
    row = UsageRow(grain, int(bucket), key, model)
    for name, value in zip(UsageRow.COUNTERS, counters, strict=True):
        setattr(row, name, float(value) if name == "cost" else int(value))
    row.latency = list(orjson.loads(latency))
    row.error_codes = dict(orjson.loads(codes))
    return row


USAGE_COLUMNS = ("grain", "bucket", "key", "model", *UsageRow.COUNTERS, "latency", "error_codes")
