"""Tenancy: every stored or in-flight response belongs to the API key (tenant) that created it.

Another key gets exactly what a missing id gets (404 ``not_found``) on every route: retrieve,
input items, continue (``previous_response_id``), cancel and delete; so does the same tenant
for a response of a model its allow-list excludes.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from app.config import GatewayConfig
from tests.support.gateway import MODEL, gateway
from tests.support.slow_upstream import EndlessUpstream, endless_transport
from tests.support.wire import Replay

KEYS = {"a": "key-a-secret", "b": "key-b-secret", "a-limited": "key-a-limited"}


def _config(store: str = ":memory:") -> GatewayConfig:
    def entry(name: str, tenant: str, models: list[str] | None = None) -> dict[str, Any]:
        return {"name": tenant, "sha256": hashlib.sha256(KEYS[name].encode()).hexdigest(), "models": models}
    return GatewayConfig.model_validate({
        "store": {"path": store},
        "auth": {"keys": [entry("a", "team-a"), entry("b", "team-b"),
                          entry("a-limited", "team-a", ["other-model"])]},
        "models": {name: {"backend": "llamacpp", "base_urls": ["http://llama.test:8080"],
                          "context_window": 4096} for name in (MODEL, "other-model")}})


def _as(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[name]}"}


def _routes(rid: str, model: str = MODEL) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [("GET", f"/v1/responses/{rid}", None),
            ("GET", f"/v1/responses/{rid}/input_items", None),
            ("POST", "/v1/responses", {"model": model, "input": "more", "previous_response_id": rid}),
            ("POST", f"/v1/responses/{rid}/cancel", None),
            ("DELETE", f"/v1/responses/{rid}", None)]


async def _assert_invisible(c: httpx.AsyncClient, rid: str, who: str) -> None:
    # Continue with a model the key may use: the *previous response* is what must not be found.
    for method, path, body in _routes(rid, "other-model" if who == "a-limited" else MODEL):
        r = await c.request(method, path, json=body, headers=_as(who))
        assert r.status_code == 404, (who, method, path, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and rid in error["message"]
        if body is not None:
            assert (error["param"], error["code"]) == ("previous_response_id", "previous_response_not_found")


async def test_other_tenants_and_excluded_models_get_404_everywhere(tmp_path: Path) -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(),
                       _config(str(tmp_path / "r.sqlite3"))) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers=_as("a"))
        assert r.status_code == 200
        rid = r.json()["id"]
        await _assert_invisible(c, rid, "b")
        await _assert_invisible(c, rid, "a-limited")  # same tenant, model not in its allow-list
        # The owner still has everything (B's DELETE above did not delete it).
        assert (await c.get(f"/v1/responses/{rid}", headers=_as("a"))).status_code == 200
        assert (await c.get(f"/v1/responses/{rid}/input_items", headers=_as("a"))).status_code == 200
        assert (await c.delete(f"/v1/responses/{rid}", headers=_as("a"))).status_code == 200
    owners = sqlite3.connect(tmp_path / "r.sqlite3").execute("SELECT owner FROM responses").fetchall()
    assert owners == []  # deleted by its owner


async def test_in_flight_background_run_is_scoped_to_its_tenant() -> None:
    upstream = EndlessUpstream()
    transport = endless_transport(upstream)
    async with gateway(transport, _config()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True},
                         headers=_as("a"))
        rid = r.json()["id"]
        await upstream.five_sent.wait()
        for method, path, _ in _routes(rid)[:1] + _routes(rid)[3:4]:
            assert (await c.request(method, path, headers=_as("b"))).status_code == 404
        assert upstream.closed_at is None, "B's cancel must not stop A's run"
        r = await c.get(f"/v1/responses/{rid}", headers=_as("a"))
        assert r.json()["status"] == "in_progress"
        r = await c.post(f"/v1/responses/{rid}/cancel", headers=_as("a"))
        assert r.status_code == 200 and r.json()["status"] == "cancelled"


async def test_store_from_before_tenancy_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, "
               "status TEXT NOT NULL, resource BLOB NOT NULL, input_items BLOB NOT NULL)")
    db.execute("INSERT INTO responses VALUES ('resp_old', 1, 'completed', ?, '[]')",
               (b'{"id": "resp_old", "model": "%s"}' % MODEL.encode(),))
    db.commit()
    db.close()
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), _config(str(path))) as c:
        # Rows without an owner belong to no key: invisible to every tenant.
        assert (await c.get("/v1/responses/resp_old", headers=_as("a"))).status_code == 404
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers=_as("b"))
        assert r.status_code == 200
    rows = dict(sqlite3.connect(path).execute("SELECT id, owner FROM responses").fetchall())
    assert rows == {"resp_old": "", r.json()["id"]: "team-b"}


async def test_the_list_pages_through_the_callers_own_responses_only() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), _config()) as c:
        mine = []
        for i in range(5):
            r = await c.post("/v1/responses", headers=_as("a"), json={"model": MODEL, "input": f"q{i}"})
            assert r.status_code == 200, r.text
            mine.append(r.json()["id"])
        b = await c.post("/v1/responses", headers=_as("b"), json={"model": MODEL, "input": "x"})
        other = b.json()["id"]
        newest_first = list(reversed(mine))
        seen, after = [], None
        while True:
            params: dict[str, Any] = {"limit": 2} | ({"after": after} if after else {})
            page = (await c.get("/v1/responses", headers=_as("a"), params=params)).json()
            assert page["object"] == "list" and len(page["data"]) <= 2
            seen += [r["id"] for r in page["data"]]
            if not page["has_more"]:
                break
            after = page["last_id"]
        asc = await c.get("/v1/responses", headers=_as("a"), params={"order": "asc", "limit": 100})
        oldest = asc.json()
        theirs = (await c.get("/v1/responses", headers=_as("b"))).json()
        limited = (await c.get("/v1/responses", headers=_as("a-limited"))).json()  # MODEL excluded
        foreign_cursor = await c.get("/v1/responses", headers=_as("a"), params={"after": other})
        bad_limit = await c.get("/v1/responses", headers=_as("a"), params={"limit": 0})
    assert seen == newest_first  # every page in order, nothing twice, nothing missing
    assert [r["id"] for r in oldest["data"]] == mine and oldest["has_more"] is False
    assert [r["id"] for r in theirs["data"]] == [other]
    assert limited["data"] == [] and limited["has_more"] is False
    assert foreign_cursor.status_code == 404 and foreign_cursor.json()["error"]["param"] == "after"
    assert bad_limit.status_code == 400 and bad_limit.json()["error"]["param"] == "limit"
