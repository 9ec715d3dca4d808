"""Two gateways on one PostgreSQL (``[store] url``): a response made on one is read,
continued, listed and deleted on the other; a conversation grows from both.  (Limits,
cancel and stream resume across replicas need Redis: issue 28, not yet.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from tests.support.gateway import MODEL, config, gateway
from tests.support.postgres import postgres_cluster, postgres_server
from tests.support.switch_model import Switch, answer


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


async def database(url: str) -> str:
    name = f"g{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    return url.rsplit("/", 1)[0] + f"/{name}"


def on(url: str, tmp: Any) -> Any:
    c = config(store_path=str(tmp))
    return c.model_copy(update={"store": c.store.model_copy(update={"url": url})})


async def test_one_service_whichever_replica(postgres: str, tmp_path: Any) -> None:
    url = await database(postgres)
    model = Switch(answer("Hello."), ("Again", answer("Hello again.")))
    async with gateway(model.transport(), on(url, tmp_path / "a.sqlite3")) as a, \
            gateway(model.transport(), on(url, tmp_path / "b.sqlite3")) as b:
        first = (await a.post("/v1/responses", json={"model": MODEL, "input": "Hi"})).json()
        assert first["status"] == "completed"
        got = await b.get(f"/v1/responses/{first['id']}")
        assert got.status_code == 200 and got.json()["output"] == first["output"]
        second = await b.post("/v1/responses", json={"model": MODEL, "input": "Again",
                                                      "previous_response_id": first["id"]})
        assert second.status_code == 200, second.text
        assert "Hi" in model.prompts[-1] and "Hello." in model.prompts[-1]  # A's turn in B's prompt
        items = (await a.get(f"/v1/responses/{second.json()['id']}/input_items")).json()["data"]
        assert [i["type"] for i in items][:1] == ["message"]
        listed = await a.get("/v1/responses")
        assert listed.status_code == 200, listed.text
        assert {r["id"] for r in listed.json()["data"]} >= {first["id"], second.json()["id"]}
        conv = (await a.post("/v1/conversations", json={"items": [
            {"type": "message", "role": "user", "content": "from A"}]})).json()
        r = await b.post("/v1/responses", json={"model": MODEL, "input": "Again",
                                                 "conversation": conv["id"]})
        assert r.status_code == 200, r.text
        seen = (await a.get(f"/v1/conversations/{conv['id']}/items", params={"order": "asc"})).json()["data"]
        assert [i["type"] for i in seen] == ["message", "message", "message"]  # A's, B's input, the answer
        assert (await b.delete(f"/v1/responses/{first['id']}")).status_code == 200
        assert (await a.get(f"/v1/responses/{first['id']}")).status_code == 404


async def test_the_database_going_away_is_a_503_and_coming_back_is_recovery(tmp_path: Any) -> None:
    """PostgreSQL stopped under a running gateway: stateful calls answer 503 with Retry-After,
    ``store: false`` keeps working; started again, the same gateway serves what was stored."""
    with postgres_cluster() as pg:
        model = Switch(answer("Hello."))
        async with gateway(model.transport(), on(pg.url, tmp_path / "a.sqlite3")) as c:
            first = (await c.post("/v1/responses", json={"model": MODEL, "input": "Hi"})).json()
            pg.stop()
            down = await c.get(f"/v1/responses/{first['id']}")
            assert down.status_code == 503 and down.json()["error"]["code"] == "store_unavailable"
            assert int(down.headers["retry-after"]) >= 1
            stored = await c.post("/v1/responses", json={"model": MODEL, "input": "Hi"})
            assert stored.status_code == 503
            plain = await c.post("/v1/responses", json={"model": MODEL, "input": "Hi", "store": False})
            assert plain.status_code == 200 and plain.json()["status"] == "completed"
            pg.start()
            back = await c.get(f"/v1/responses/{first['id']}")
            assert back.status_code == 200 and back.json()["output"] == first["output"]
