"""One service whichever replica: three ``ocm-gateway serve`` processes on one PostgreSQL and
one Redis (both real, from Debian) behind a round-robin proxy, a real llama.cpp server behind
them.  The client opens a connection per request, so consecutive requests land on
consecutive replicas: create on one, then retrieve, continue, list, delete, cancel, resume and
append to a conversation through the others; a key's rate limit holds over all three."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import run_gateway
from tests.support.fixtures import SCRIPT_FINAL
from tests.support.llama_server import llama_server
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.postgres import postgres_server
from tests.support.process import Running
from tests.support.redis_server import redis_server
from tests.support.rr_proxy import round_robin
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
KEY = "sk-replicas"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Running]]:
    tmp = tmp_path_factory.mktemp("replicas")
    endless = LoopbackUpstream(interval=0.02)
    with postgres_server() as pg, redis_server() as redis, endless.running() as endless_url, \
            llama_server(scripted_model("final", SCRIPT_FINAL)) as llama:
        configs = []
        for n in range(3):
            path = tmp / f"r{n}.toml"
            path.write_text("\n".join([
                "[store]", f'path = "{tmp}/r{n}.sqlite3"', f'url = "{pg}"', "",
                "[redis]", f'url = "{redis.url}"', "",
                "[[auth.keys]]", 'name = "team"', f'sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"',
                "", "[[auth.keys]]", 'name = "limited"',
                f'sha256 = "{hashlib.sha256(b"sk-limited").hexdigest()}"', "requests_per_minute = 5", "",
                '[models."final"]', 'backend = "llamacpp"', f'base_urls = ["{llama}"]',
                "context_window = 4096",
                '[models."final".harmony]', 'current_date = "2026-11-26"', "",
                '[models."endless"]', f'base_urls = ["{endless_url}"]', ""]))
            configs.append(path)
        with run_gateway(configs[0]) as a, run_gateway(configs[1]) as b, run_gateway(configs[2]) as c:
            yield [a, b, c]


def _events(text: str) -> list[Any]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


async def test_one_service_whichever_replica(replicas: list[Running]) -> None:
    backends = [(httpx.URL(r.url).host, httpx.URL(r.url).port or 80) for r in replicas]
    async with round_robin(backends) as lb:
        fresh = httpx.Limits(max_keepalive_connections=0)  # a connection per request: round robin
        async with httpx.AsyncClient(base_url=lb, headers=AUTH, limits=fresh, timeout=60) as c:
            first = (await c.post("/v1/responses", json={"model": "final", "input": "Hi"})).json()
            assert first["status"] == "completed"
            for _ in range(3):  # every replica reads it
                assert (await c.get(f"/v1/responses/{first['id']}")).json()["output"] == first["output"]
            second = await c.post("/v1/responses", json={"model": "final", "input": "Again",
                                                          "previous_response_id": first["id"]})
            assert second.status_code == 200, second.text
            listed = (await c.get("/v1/responses")).json()["data"]
            assert {first["id"], second.json()["id"]} <= {r["id"] for r in listed}
            conv = (await c.post("/v1/conversations", json={"items": [
                {"type": "message", "role": "user", "content": "hello"}]})).json()
            for _ in range(2):
                r = await c.post("/v1/responses", json={"model": "final", "input": "more",
                                                         "conversation": conv["id"]})
                assert r.status_code == 200, r.text
            page = await c.get(f"/v1/conversations/{conv['id']}/items", params={"limit": 100})
            items = page.json()["data"]
            assert len(items) == 5  # hello, then two turns of input + answer
            assert (await c.delete(f"/v1/responses/{first['id']}")).status_code == 200
            for _ in range(3):
                assert (await c.get(f"/v1/responses/{first['id']}")).status_code == 404
            # a background run on one replica, followed and cancelled through the others
            bg = (await c.post("/v1/responses", json={"model": "endless", "input": "go",
                                                       "background": True})).json()
            await asyncio.sleep(0.5)
            seqs: list[int] = []
            async with c.stream("GET", f"/v1/responses/{bg['id']}",
                                params={"stream": "true", "starting_after": "3"}) as live:
                assert live.status_code == 200
                async for line in live.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        seqs.append(json.loads(line[6:])["sequence_number"])
                    if len(seqs) == 5:
                        break
            assert seqs == [4, 5, 6, 7, 8]  # followed live, from whichever replica
            cancelled = await c.post(f"/v1/responses/{bg['id']}/cancel")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
            for _ in range(3):
                assert (await c.get(f"/v1/responses/{bg['id']}")).json()["status"] == "cancelled"
                replay = _events((await c.get(f"/v1/responses/{bg['id']}", params={"stream": "true"})).text)
                assert replay[0]["sequence_number"] == 0 and replay[-1]["type"] == "response.failed"
            # a key with 5 requests per minute: exactly 5 pass, over all three replicas
            limited = {"authorization": "Bearer sk-limited"}
            codes = [(await c.post("/v1/responses", headers=limited, json={
                "model": "final", "input": "x", "store": False})).status_code for _ in range(9)]
            assert codes == [200] * 5 + [429] * 4
