"""Usage per key × model (hour and day rows), its query API and metrics, and budgets: a key
over its budget gets OpenAI's 429 ``insufficient_quota`` with its reset time, on every replica
sharing the store once the spend is flushed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.config import GatewayConfig
from tests.support.gateway import MODEL, gateway
from tests.support.wire import Replay
from tests.unit.api.admin.test_keys import ADMIN_H, CHAT, admin_config, bearer


async def test_usage_is_counted_per_key_and_model_and_queryable(tmp_path: Path) -> None:
    replay = Replay("03a_completion_tokenids_stream")
    cfg = admin_config(tmp_path / "s.sqlite3")
    async with gateway(replay.transport(), cfg) as c:
        made = (await c.post("/admin/keys", headers=ADMIN_H, json={
            "name": "team-a", "requests_per_minute": 2,
            "prices": {MODEL: {"input": 1000.0, "output": 2000.0}}})).json()
        key = bearer(made["secret"])
        usages = [(await c.post("/v1/chat/completions", json=CHAT, headers=key)).json()["usage"]
                  for _ in range(2)]
        r = await c.post("/v1/chat/completions", json=CHAT, headers=key)
        assert r.status_code == 429
        r = await c.get("/admin/usage", headers=ADMIN_H, params={"group_by": "key,model"})
        rows = {(row["key"], row["model"]): row for row in r.json()["data"]}
        row = rows[(made["id"], MODEL)]
        prompt = sum(u["prompt_tokens"] for u in usages)
        completion = sum(u["completion_tokens"] for u in usages)
        assert prompt > 0 and completion > 0
        assert (row["input_tokens"], row["output_tokens"]) == (prompt, completion)
        assert row["cost"] == round((prompt * 1000 + completion * 2000) / 1e6, 6)
        assert row["latency_ms"]["p50"] is not None
        # the 429 was refused before the route read the model: counted for the model it asked for
        assert row["requests"] == 3 and row["errors"] == 1
        assert row["error_codes"] == {"rate_limit_exceeded": 1}
        assert (made["id"], "-") not in rows
        hourly = (await c.get("/admin/usage", headers=ADMIN_H,
                              params={"group_by": "hour", "key": made["id"], "model": MODEL})).json()
        assert hourly["grain"] == "hour" and [h["requests"] for h in hourly["data"]] == [3]
        assert set(hourly["data"][0]) >= {"start", "input_tokens", "reasoning_tokens", "tool_rounds"}
        for bad in ({"group_by": "hour,day"}, {"group_by": "color"}, {"from": "yesterday"},
                    {"from": "2026-01-01", "to": "2025-01-01"}):
            assert (await c.get("/admin/usage", headers=ADMIN_H, params=bad)).status_code == 400, bad
        metrics = (await c.get("/metrics")).text
        line = f'ocm_key_tokens_total{{direction="in",key="{made["id"]}",model="{MODEL}"}} {float(prompt)}'
        assert line in metrics
        assert made["secret"] not in metrics
        errors = (await c.get("/admin/errors", headers=ADMIN_H)).json()["data"]
        limited_error = next(e for e in errors if e["status"] == 429)
        assert limited_error["code"] == "rate_limit_exceeded" and limited_error["key"] == made["id"]
        assert limited_error["request_id"].startswith("req_") and errors[0]["status"] == 400  # newest first
    # flushed on shutdown: a new process on the same store sees it all
    async with gateway(replay.transport(), cfg) as c:
        assert (await c.get("/v1/models", headers=ADMIN_H)).status_code == 401
        store = c._transport.app.state.accounts  # type: ignore[attr-defined]
        rows2 = await store.usage("day", 0, 2**40, key=made["id"], model=MODEL)
        assert rows2[0].requests == 3 and rows2[0].input_tokens == prompt


async def test_budget_stops_the_key_on_every_replica(tmp_path: Path) -> None:
    cfg = admin_config(tmp_path / "s.sqlite3", usage={"flush_seconds": 0.2, "budget_refresh_seconds": 0.1})
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), cfg) as a, gateway(replay.transport(), cfg) as b:
        made = (await a.post("/admin/keys", headers=ADMIN_H, json={
            "name": "capped", "budget": {"tokens": 10, "period": "day"}})).json()
        key = bearer(made["secret"])
        first = await a.post("/v1/chat/completions", json=CHAT, headers=key)
        assert first.status_code == 200 and first.json()["usage"]["total_tokens"] >= 10
        r = await a.post("/v1/chat/completions", json=CHAT, headers=key)  # this replica: at once
        assert r.status_code == 429
        error = r.json()["error"]
        assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_quota")
        assert "day budget" in error["message"] and "resets at" in error["message"]
        assert r.headers["x-should-retry"] == "false"
        r = await a.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers=key)
        assert r.status_code == 429
        await asyncio.sleep(0.6)  # A flushed, B re-read the spend
        r = await b.post("/v1/chat/completions", json=CHAT, headers=key)
        assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota"
        # raising the budget lets it through again
        await a.post(f"/admin/keys/{made['id']}", headers=ADMIN_H,
                     json={"budget": {"tokens": 10_000, "period": "day"}})
        assert (await a.post("/v1/chat/completions", json=CHAT, headers=key)).status_code == 200


async def test_a_background_response_is_counted_when_its_run_ends(tmp_path: Path) -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), admin_config(tmp_path / "s.sqlite3")) as c:
        made = (await c.post("/admin/keys", headers=ADMIN_H, json={"name": "bg"})).json()
        key = bearer(made["secret"])
        r = await c.post("/v1/responses", headers=key,
                         json={"model": MODEL, "input": "hi", "background": True, "store": True})
        response_id = r.json()["id"]
        for _ in range(100):
            done = (await c.get(f"/v1/responses/{response_id}", headers=key)).json()
            if done["status"] == "completed":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)
        rows = (await c.get("/admin/usage", headers=ADMIN_H,
                            params={"group_by": "key,model", "key": made["id"]})).json()["data"]
        assert rows[0]["requests"] == 1
        assert rows[0]["input_tokens"] == done["usage"]["input_tokens"] > 0
        assert rows[0]["output_tokens"] == done["usage"]["output_tokens"]


async def test_keys_usage_and_budgets_on_postgres(tmp_path: Path) -> None:
    """Two gateways on one PostgreSQL database (each with its own local SQLite file): a key
    made on A works on B, its usage adds up from both, its budget stops it on both, a
    revocation on A reaches B."""
    from tests.support.postgres import postgres_server

    with postgres_server() as url:
        def cfg(name: str) -> GatewayConfig:
            c = admin_config(tmp_path / f"{name}.sqlite3", auth={"key_cache_seconds": 0.3},
                             usage={"flush_seconds": 0.2, "budget_refresh_seconds": 0.1})
            return c.model_copy(update={"store": c.store.model_copy(update={"url": url})})

        replay = Replay("03a_completion_tokenids_stream")
        async with gateway(replay.transport(), cfg("a")) as a, gateway(replay.transport(), cfg("b")) as b:
            made = (await a.post("/admin/keys", headers=ADMIN_H, json={
                "name": "pg", "budget": {"tokens": 200, "period": "month"}})).json()
            key = bearer(made["secret"])
            used = 0
            for client in (a, b, a, b):
                r = await client.post("/v1/chat/completions", json=CHAT, headers=key)
                if r.status_code != 200:
                    break
                used += r.json()["usage"]["total_tokens"]
                await asyncio.sleep(0.5)  # flushed, re-read everywhere
            assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota"
            assert used >= 200
            rows = (await b.get("/admin/usage", headers=ADMIN_H,
                                params={"group_by": "key", "key": made["id"]})).json()["data"]
            assert rows[0]["total_tokens"] == used
            listed = (await b.get("/admin/keys", headers=ADMIN_H)).json()["data"]
            assert [k["id"] for k in listed] == [made["id"]]
            await b.post(f"/admin/keys/{made['id']}/revoke", headers=ADMIN_H)
            await asyncio.sleep(0.4)
            assert (await a.post("/v1/chat/completions", json=CHAT, headers=key)).status_code == 401
