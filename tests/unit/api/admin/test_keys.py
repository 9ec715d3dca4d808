"""Keys made through /admin/keys: the secret shown once, used through the model APIs, limits
and allow-lists applied, revoked / rotated / expired keys refused (on this replica at once, on
another sharing the store within [auth] key_cache_seconds), the admin key and ordinary keys
never accepted in each other's place, secrets never logged."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import GatewayConfig
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

ADMIN, OLD = "admin-secret-1", "sk-config-key"
ADMIN_H = {"authorization": f"Bearer {ADMIN}"}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


def admin_config(path: Path | str = ":memory:", **more: Any) -> GatewayConfig:
    data = config(store_path=str(path)).model_dump()
    data["admin"] = {"key_sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}
    data["auth"] = {"keys": [{"name": "config-key", "sha256": hashlib.sha256(OLD.encode()).hexdigest()}],
                    **more.pop("auth", {})}
    data.update(more)
    return GatewayConfig.model_validate(data)


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


async def test_admin_api_is_off_without_an_admin_key() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport()) as c:
        r = await c.get("/admin/keys")
        assert r.status_code == 404 and "admin API is off" in r.json()["error"]["message"]
        assert (await c.post("/admin/keys", json={"name": "x"}, headers=ADMIN_H)).status_code == 404


async def test_admin_key_and_ordinary_keys_never_stand_in_for_each_other() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
        made = (await c.post("/admin/keys", json={"name": "team-a"}, headers=ADMIN_H)).json()
        for headers in ({}, bearer(OLD), bearer(made["secret"]), bearer("nope"), {"authorization": ADMIN}):
            r = await c.get("/admin/keys", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_admin_key", headers
        r = await c.post("/v1/chat/completions", json=CHAT, headers=ADMIN_H)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = await c.get("/admin/keys", headers={**ADMIN_H, "sec-fetch-site": "cross-site"})
        assert r.status_code == 401  # a page on another site cannot drive the admin API


async def test_create_use_list_update_revoke(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), admin_config()) as c:
        r = await c.post("/admin/keys", headers=ADMIN_H, json={
            "name": "team-a", "owner": "search", "models": [MODEL], "requests_per_minute": 2,
            "metadata": {"ticket": "OPS-1"}})
        assert r.status_code == 201
        made = r.json()
        secret = made["secret"]
        assert secret.startswith("ocm-") and len(secret) == 44 and made["status"] == "active"
        assert "sha256" not in made and made["hint"] == f"{secret[:8]}…{secret[-4:]}"
        listed = (await c.get("/admin/keys", headers=ADMIN_H)).json()["data"]
        assert [k["name"] for k in listed] == ["team-a"] and secret not in str(listed)
        shown = (await c.get(f"/admin/keys/{made['id']}", headers=ADMIN_H)).json()
        assert "secret" not in shown and shown["metadata"] == {"ticket": "OPS-1"}

        assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))).status_code == 200
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(OLD))).status_code == 200
        r = await c.post("/v1/chat/completions", json={**CHAT, "model": "other"}, headers=bearer(secret))
        assert r.status_code == 404  # outside its allow-list
        r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
        assert r.status_code == 429 and r.json()["error"]["code"] != "insufficient_quota"  # 2 rpm

        r = await c.post(f"/admin/keys/{made['id']}", headers=ADMIN_H, json={"requests_per_minute": 100})
        assert r.status_code == 200 and r.json()["requests_per_minute"] == 100
        assert r.json()["models"] == [MODEL]  # what the update did not name stays
        assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))).status_code == 200

        r = await c.post(f"/admin/keys/{made['id']}/revoke", headers=ADMIN_H)
        assert r.json()["status"] == "revoked"
        r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
        assert r.status_code == 401  # at once on the replica that revoked it
        assert (await c.post(f"/admin/keys/{made['id']}/rotate", headers=ADMIN_H)).status_code == 404
        assert (await c.get("/admin/keys/key_missing", headers=ADMIN_H)).status_code == 404
        r = await c.post("/admin/keys", headers=ADMIN_H, json={"name": "x", "requests_per_minute": "5"})
        assert r.status_code == 400
    assert not [rec for rec in caplog.records if secret in rec.getMessage() or ADMIN in rec.getMessage()]


async def test_rotation_keeps_the_tenant_and_stops_the_old_secret() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), admin_config()) as c:
        made = (await c.post("/admin/keys", headers=ADMIN_H, json={"name": "k"})).json()
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi", "store": True},
                         headers=bearer(made["secret"]))
        response_id = r.json()["id"]
        rotated = (await c.post(f"/admin/keys/{made['id']}/rotate", headers=ADMIN_H)).json()
        assert rotated["secret"] != made["secret"] and rotated["id"] == made["id"]
        r = await c.get(f"/v1/responses/{response_id}", headers=bearer(made["secret"]))
        assert r.status_code == 401
        r = await c.get(f"/v1/responses/{response_id}", headers=bearer(rotated["secret"]))
        assert r.status_code == 200  # the same tenant
        assert (await c.get(f"/v1/responses/{response_id}", headers=bearer(OLD))).status_code == 404


async def test_expired_key_is_refused_with_its_own_message() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
        expires = int(time.time()) + 2  # at least 1 s away (int() rounds down)
        made = (await c.post("/admin/keys", headers=ADMIN_H,
                             json={"name": "k", "expires_at": expires})).json()
        r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(made["secret"]))
        assert r.status_code == 200
        await asyncio.sleep(expires - time.time() + 0.1)
        r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(made["secret"]))
        assert r.status_code == 401 and "expired" in r.json()["error"]["message"]
        assert (await c.get(f"/admin/keys/{made['id']}", headers=ADMIN_H)).json()["status"] == "expired"


async def test_revocation_reaches_another_replica_within_the_cache_time(tmp_path: Path) -> None:
    """Two gateways on one store file: B refuses a key A revoked once B's cache entry expires."""
    cfg = admin_config(tmp_path / "s.sqlite3", auth={"key_cache_seconds": 0.5})
    replay = Replay("03a_completion_tokenids_stream")
    async with gateway(replay.transport(), cfg) as a, gateway(replay.transport(), cfg) as b:
        made = (await a.post("/admin/keys", headers=ADMIN_H, json={"name": "k"})).json()
        key = bearer(made["secret"])
        assert (await b.post("/v1/chat/completions", json=CHAT, headers=key)).status_code == 200
        await a.post(f"/admin/keys/{made['id']}/revoke", headers=ADMIN_H)
        assert (await a.post("/v1/chat/completions", json=CHAT, headers=key)).status_code == 401
        await asyncio.sleep(0.6)
        assert (await b.post("/v1/chat/completions", json=CHAT, headers=key)).status_code == 401


async def test_console_is_served_with_a_strict_policy() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
        for path in ("/console", "/console/console.js", "/console/console.css"):
            r = await c.get(path)
            assert r.status_code == 200, path
            csp = r.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
            assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        page = (await c.get("/console")).text
        assert "<script>" not in page and "http://" not in page and "https://" not in page  # no CDN
        assert (await c.get("/console/..%2Fapp%2Fconfig.py")).status_code == 404
        assert (await c.get("/console/secret.txt")).status_code == 404


def test_store_failure_while_looking_up_a_key_is_a_503() -> None:
    async def scenario() -> None:
        async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
            transport = c._transport
            assert isinstance(transport, httpx.ASGITransport)
            app: Any = transport.app
            from app.stores.postgres import StoreUnavailable

            class Down:
                async def key_by_hash(self, sha: str) -> None:
                    raise StoreUnavailable("down")

            app.state.key_resolver.store = Down()
            r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer("ocm-unknown"))
            assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
            assert (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(OLD))).status_code == 200

    asyncio.run(scenario())
