"""The accounts contract of app/stores/accounts.py (keys and usage) on SQLite, PostgreSQL (a
real server) and memory: the same scenarios on each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from app.stores.accounts import AccountStore, UsageRow, period_end, period_start
from app.stores.memory_accounts import MemoryAccountStore
from app.stores.postgres_accounts import PostgresAccountStore
from app.stores.sqlite_accounts import SqliteAccountStore
from app.stores.sqlite_db import configure
from tests.support.postgres import fresh_pool, postgres_server


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AccountStore]:
    if request.param == "sqlite":
        db = await aiosqlite.connect(str(tmp_path / "a.sqlite3"))
        await configure(db)
        yield await SqliteAccountStore.open(db)
        await db.close()
    elif request.param == "postgres":
        pool = await fresh_pool(request.getfixturevalue("postgres"))
        yield PostgresAccountStore(pool)
        await pool.close()
    else:
        yield MemoryAccountStore()


def _key(key_id: str, sha: str, **more: Any) -> dict[str, Any]:
    return {"id": key_id, "sha256": sha * 64, "name": key_id, "created_at": 1, "revoked_at": None, **more}


async def test_keys_keep_every_number_the_admin_api_allows_exactly(store: AccountStore) -> None:
    """The bounds of /admin/keys (app/api/admin/keys.py) fit every store: each numeric field at
    its largest and smallest allowed value reads back exactly."""
    from app.config import MAX_COST, MAX_EXPIRES_AT, MAX_INT, MAX_LIMIT, MAX_PRICE

    for i, (limit, tokens, cost, price, expires) in enumerate([
            (MAX_LIMIT, MAX_INT, MAX_COST, MAX_PRICE, MAX_EXPIRES_AT), (1, 1, 5e-324, 0.0, 0),
            (MAX_LIMIT - 1, MAX_INT - 1, 0.1, 1e-9, MAX_EXPIRES_AT - 1)]):
        record = _key(f"key_{i}", "abc"[i], requests_per_minute=limit, tokens_per_minute=limit,
                      max_concurrent=limit, budget={"period": "month", "tokens": tokens, "cost": cost},
                      prices={"m": {"input": price, "output": price}}, expires_at=expires)
        await store.put_key(record)
        assert await store.get_key(f"key_{i}") == record
        assert await store.key_by_hash("abc"[i] * 64) == record


async def test_keys_put_get_find_list_and_unique_secret(store: AccountStore) -> None:
    await store.put_key(_key("key_a", "a", models=["m"]))
    await store.put_key(_key("key_b", "b"))
    assert (await store.get_key("key_a") or {})["models"] == ["m"]
    assert (await store.key_by_hash("b" * 64) or {})["id"] == "key_b"
    assert await store.key_by_hash("c" * 64) is None and await store.get_key("key_c") is None
    assert [k["id"] for k in await store.list_keys()] == ["key_a", "key_b"]
    await store.put_key(_key("key_a", "c", revoked_at=5))  # rotate + revoke: the same record
    assert await store.key_by_hash("a" * 64) is None
    assert (await store.key_by_hash("c" * 64) or {})["revoked_at"] == 5
    with pytest.raises(ValueError):
        await store.put_key(_key("key_z", "b"))  # another key's secret
    assert len(await store.list_keys()) == 2


def _row(grain: Any, bucket: int, key: str = "k", model: str = "m", **counts: Any) -> UsageRow:
    row = UsageRow(grain, bucket, key, model)
    for name, value in counts.items():
        setattr(row, name, value)
    return row


async def test_usage_adds_up_and_reads_back_by_range_key_and_model(store: AccountStore) -> None:
    a = _row("day", 86400, input_tokens=10, output_tokens=5, requests=1, cost=0.5)
    a.observe_latency(0.03)
    a.error_codes["rate_limited"] = 1
    await store.add_usage([a, _row("day", 86400, model="n", input_tokens=1, requests=1)])
    b = _row("day", 86400, input_tokens=3, requests=2, errors=1)
    b.observe_latency(2.0)
    b.error_codes["rate_limited"] = 2
    await store.add_usage([b, _row("day", 2 * 86400, input_tokens=100, requests=1),
                           _row("hour", 86400, input_tokens=7)])
    rows = await store.usage("day", 0, 10 * 86400, key="k", model="m")
    assert [(r.bucket, r.requests, r.input_tokens, r.output_tokens) for r in rows] == [
        (86400, 3, 13, 5), (2 * 86400, 1, 100, 0)]
    first = rows[0]
    assert first.errors == 1 and first.error_codes == {"rate_limited": 3} and first.cost == pytest.approx(0.5)
    assert sum(first.latency) == 2 and first.percentile(0.5) == 50 and first.percentile(0.99) == 2470
    assert len(await store.usage("day", 0, 10 * 86400)) == 3
    assert len(await store.usage("day", 2 * 86400, 3 * 86400)) == 1
    assert [r.input_tokens for r in await store.usage("hour", 0, 10**9)] == [7]
    assert await store.spent("k", 0) == (119, pytest.approx(0.5))
    assert (await store.spent("k", 2 * 86400))[0] == 100
    assert await store.expire_usage("day", 2 * 86400) == 2
    assert len(await store.usage("day", 0, 10**9)) == 1


async def test_concurrent_flushes_lose_nothing(store: AccountStore) -> None:
    await asyncio.gather(*(store.add_usage([_row("day", 0, requests=1, input_tokens=2),
                                            _row("hour", 0, requests=1)]) for _ in range(20)))
    [row] = await store.usage("day", 0, 1)
    assert (row.requests, row.input_tokens) == (20, 40)


def test_periods() -> None:
    t = 1795700000  # 2026-11-26 ...
    assert period_start("day", t) == 1795651200 and period_end("day", t) == 1795651200 + 86400
    assert period_start("month", t) == 1793491200  # 2026-11-01
    assert period_end("month", t) == 1796083200  # 2026-12-01
    assert period_start("month", 1798761599) == 1796083200  # 2026-12-31 23:59:59
    assert period_end("month", 1798761599) == 1798761600  # 2027-01-01
    assert period_start("total", t) == 0 and period_end("total", t) is None


def test_percentiles_are_interpolated_inside_their_bucket() -> None:
    row = UsageRow("day", 0, "k", "m")
    for _ in range(10):
        row.observe_latency(0.6)  # ten requests of ~600 ms: all in the (500, 1000] bucket
    assert row.percentile(0.5) == 750 and row.percentile(0.95) == 975
    assert row.percentile(0.1) == 550
    slow = UsageRow("day", 0, "k", "m")
    slow.observe_latency(400.0)  # beyond the last bound: only its lower bound is known
    assert slow.percentile(0.5) == 300_000
    assert UsageRow("day", 0, "k", "m").percentile(0.5) is None
