"""A shipped multi-replica deployment checked as deployed: the gateway config loaded from the
shipped file with the environment the deployment gives each replica, then two replicas of it
(in-process, on a real PostgreSQL; upstream hosts answered by a fake llama.cpp) behind round
robin: reasoning sealed by one is opened by the other, and a stored chat completion made on
one is read, listed, updated and deleted on the other."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.config import GatewayConfig, load_config
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import gateway
from tests.support.postgres import fresh_database

THINK = ("<|channel|>analysis<|message|>Think it over.<|end|><|start|>assistant"
         "<|channel|>final<|message|>Done.<|return|>")


def interpolate(value: str, dotenv: Mapping[str, str]) -> str:
    """Compose's ``${NAME:-default}`` / ``${NAME}`` with ``dotenv`` as the environment."""
    def one(m: re.Match[str]) -> str:
        name, default = m[1], m[3] or ""
        return dotenv.get(name) or default
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", one, value)


def replica_config(config_file: Path, env: Mapping[str, str]) -> GatewayConfig:
    """What a replica loads: the shipped file, the environment its deployment sets."""
    return load_config(config_file, env=dict(env))


async def check_two_replicas(cfg: GatewayConfig, other: GatewayConfig, pg: str, tmp: Path) -> None:
    """Two replicas of these configs on one new database of the server at ``pg``."""
    url = await fresh_database(pg)

    def local(c: GatewayConfig, name: str) -> GatewayConfig:  # the test's PostgreSQL, no Redis
        return c.model_copy(update={
            "store": c.store.model_copy(update={"url": url, "path": str(tmp / f"{name}.sqlite3")}),
            "redis": c.redis.model_copy(update={"url": None})})

    model = next(iter(cfg.models))
    up = FakeLlamaCpp(THINK)
    async with gateway(up.transport(), local(cfg, "a")) as a, \
            gateway(up.transport(), local(other, "b")) as b:
        first = await a.post("/v1/responses", json={
            "model": model, "input": "Hi", "store": False, "include": ["reasoning.encrypted_content"]})
        assert first.status_code == 200, first.text
        reasoning = first.json()["output"][0]
        assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
        replay = [{"role": "user", "content": "Hi"},
                  {"type": "reasoning", "id": reasoning["id"], "summary": [],
                   "encrypted_content": reasoning["encrypted_content"]},
                  {"role": "user", "content": "And?"}]
        second = await b.post("/v1/responses", json={"model": model, "input": replay, "store": False})
        assert second.status_code == 200, second.text  # was 400 invalid_encrypted_content
        chat = await a.post("/v1/chat/completions", json={
            "model": model, "store": True, "metadata": {"k": "v"},
            "messages": [{"role": "user", "content": "Hi"}]})
        assert chat.status_code == 200, chat.text
        cid = chat.json()["id"]
        got = await b.get(f"/v1/chat/completions/{cid}")
        assert got.status_code == 200, got.text  # was 404: per replica in SQLite
        assert got.json()["choices"] == chat.json()["choices"]
        listed = (await b.get("/v1/chat/completions", params={"model": model})).json()["data"]
        assert [c["id"] for c in listed] == [cid]
        later = (await b.post("/v1/chat/completions", json={
            "model": model, "store": True, "messages": [{"role": "user", "content": "Again"}]})).json()
        page = (await a.get("/v1/chat/completions", params={"after": cid})).json()
        assert [c["id"] for c in page["data"]] == [later["id"]] and not page["has_more"]
        newest = (await a.get("/v1/chat/completions", params={"order": "desc", "limit": 1})).json()
        assert [c["id"] for c in newest["data"]] == [later["id"]] and newest["has_more"]
        assert (await b.get(f"/v1/chat/completions/{cid}/messages")).json()["data"][0]["content"] == "Hi"
        updated = await b.post(f"/v1/chat/completions/{cid}", json={"metadata": {"k": "w"}})
        assert updated.status_code == 200 and updated.json()["metadata"] == {"k": "w"}
        assert (await a.get(f"/v1/chat/completions/{cid}")).json()["metadata"] == {"k": "w"}
        assert (await b.delete(f"/v1/chat/completions/{cid}")).status_code == 200
        assert (await a.get(f"/v1/chat/completions/{cid}")).status_code == 404
        assert (await a.get("/v1/chat/completions", params={"after": cid})).status_code == 404


def environment(service: Mapping[str, Any], dotenv: Mapping[str, str]) -> dict[str, str]:
    """A compose service's environment as a container gets it (values interpolated)."""
    return {k: interpolate(str(v), dotenv) for k, v in (service.get("environment") or {}).items()}
