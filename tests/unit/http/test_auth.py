"""API keys: hashed in config, Bearer auth, 401 in the OpenAI shape, per-key model allow-list."""

from __future__ import annotations

import hashlib

from app.config import GatewayConfig, load_config
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import Replay

ALICE, BOB = "sk-alice-secret", "sk-bob-secret"


def _cfg() -> GatewayConfig:
    data = config().model_dump()
    data["models"]["other-model"] = data["models"][MODEL]
    return GatewayConfig.model_validate({**data, "auth": {"keys": [
        {"name": "alice", "sha256": hashlib.sha256(ALICE.encode()).hexdigest()},
        {"name": "bob", "sha256": hashlib.sha256(BOB.encode()).hexdigest(), "models": ["other-model"]},
    ]}})


async def test_keys_and_allow_list() -> None:
    replay = Replay("03a_completion_tokenids_stream")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with gateway(replay.transport(), _cfg()) as c:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {ALICE}"},
                        {"authorization": "Bearer "}):
            r = await c.post("/v1/chat/completions", json=body, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"]["code"] == "invalid_api_key"
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert replay.requests == []
        assert (await c.get("/health")).status_code == 200  # health stays open
        alice = {"authorization": f"Bearer {ALICE}"}
        assert (await c.post("/v1/chat/completions", json=body, headers=alice)).status_code == 200
        bob = {"authorization": f"Bearer {BOB}"}
        r = await c.post("/v1/chat/completions", json=body, headers=bob)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers=bob)
        assert r.status_code == 404
        models = (await c.get("/v1/models", headers=bob)).json()["data"]
        assert [m["id"] for m in models] == ["other-model"]
        assert len((await c.get("/v1/models", headers=alice)).json()["data"]) == 2


def test_env_keys_are_hashed() -> None:
    cfg = load_config(None, env={"OCMGW_API_KEYS": "k1, k2", "OCMGW_MODEL": "m",
                                 "OCMGW_BACKEND_URL": "http://x"})
    assert [k.sha256 for k in cfg.auth.keys] == [hashlib.sha256(b"k1").hexdigest(),
                                                 hashlib.sha256(b"k2").hexdigest()]
    assert "k1" not in cfg.model_dump_json()
