"""Keys and usage in a process's memory (tests; the contract: :mod:`app.stores.accounts`)."""

from __future__ import annotations

import copy

from app.stores.accounts import Grain, Json, UsageRow


class MemoryAccountStore:
    def __init__(self) -> None:
        self._keys: dict[str, Json] = {}
        self._usage: dict[tuple[str, int, str, str], UsageRow] = {}

    async def put_key(self, record: Json) -> None:
        if any(k["sha256"] == record["sha256"] and k["id"] != record["id"] for k in self._keys.values()):
            raise ValueError("another key has this secret")
        self._keys[record["id"]] = copy.deepcopy(record)

    async def get_key(self, key_id: str) -> Json | None:
        found = self._keys.get(key_id)
        return copy.deepcopy(found) if found is not None else None

    async def key_by_hash(self, sha256: str) -> Json | None:
        found = next((k for k in self._keys.values() if k["sha256"] == sha256), None)
        return copy.deepcopy(found) if found is not None else None

    async def list_keys(self) -> list[Json]:
        ordered = sorted(self._keys.values(), key=lambda k: (k.get("created_at", 0), k["id"]))
        return [copy.deepcopy(k) for k in ordered]

    async def add_usage(self, rows: list[UsageRow]) -> None:
        for row in rows:
            total = self._usage.setdefault(row.ident, row.blank())
            total.add(row)

    async def usage(self, grain: Grain, start: int, end: int, key: str | None = None,
                    model: str | None = None) -> list[UsageRow]:
        found = [copy.deepcopy(r) for r in self._usage.values()
                 if r.grain == grain and start <= r.bucket < end
                 and key in (None, r.key) and model in (None, r.model)]
        return sorted(found, key=lambda r: (r.bucket, r.key, r.model))

    async def spent(self, key: str, since: int) -> tuple[int, float]:
        rows = [r for r in self._usage.values() if r.grain == "day" and r.key == key and r.bucket >= since]
        return sum(r.input_tokens + r.output_tokens for r in rows), sum(r.cost for r in rows)

    async def expire_usage(self, grain: Grain, before: int) -> int:
        gone = [k for k, r in self._usage.items() if r.grain == grain and r.bucket < before]
        for k in gone:
            del self._usage[k]
        return len(gone)
