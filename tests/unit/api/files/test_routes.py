"""The Files API in-process: every route with OpenAI's bodies, through raw HTTP and the
official SDK (``client.files.create / list / retrieve / content / delete``), tenancy with two
keys (404 everywhere), and bad input (400 naming the parameter, 413 past ``[files] max_bytes``)."""

from __future__ import annotations

import io
from typing import Any

import httpx
import openai
import pytest

from app.config import GatewayConfig
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import alice_and_bob, config, gateway
from tests.support.openresponses import expect_error as error

ANSWER = "<|channel|>final<|message|>Ok.<|return|>"
ALICE = {"authorization": "Bearer alice"}
BOB = {"authorization": "Bearer bob"}
FILE_KEYS = {"id", "object", "bytes", "created_at", "expires_at", "filename", "purpose", "status",
             "status_details"}


def two_keys(**files: Any) -> GatewayConfig:
    return alice_and_bob(files={**config().files.model_dump(), **files})


async def upload(c: httpx.AsyncClient, data: bytes = b"hello", name: str = "a.txt",
                 purpose: str = "user_data", headers: dict[str, str] = ALICE,
                 **fields: str) -> httpx.Response:
    return await c.post("/v1/files", headers=headers, data={"purpose": purpose, **fields},
                        files={"file": (name, data, "text/plain")})


async def test_every_route_with_openai_bodies() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport(), two_keys()) as c:
        r = await upload(c, b"line one\nline two\n", "notes.txt")
        assert r.status_code == 200, r.text
        f = r.json()
        assert set(f) == FILE_KEYS and f["object"] == "file" and f["id"].startswith("file-")
        assert (f["bytes"], f["filename"], f["purpose"], f["status"], f["expires_at"]) == \
               (18, "notes.txt", "user_data", "processed", None)
        got = await c.get(f"/v1/files/{f['id']}", headers=ALICE)
        assert got.json() == f
        content = await c.get(f"/v1/files/{f['id']}/content", headers=ALICE)
        assert content.content == b"line one\nline two\n"
        assert content.headers["content-type"].startswith("text/plain")
        second = (await upload(c, b"{}", "b.jsonl", "batch")).json()
        assert second["expires_at"] == second["created_at"] + 30 * 24 * 3600  # OpenAI's batch default
        page = (await c.get("/v1/files", headers=ALICE)).json()
        assert page["object"] == "list" and [x["id"] for x in page["data"]] == [second["id"], f["id"]]
        assert page["first_id"] == second["id"] and page["last_id"] == f["id"] and not page["has_more"]
        one = (await c.get("/v1/files?limit=1&order=asc", headers=ALICE)).json()
        assert [x["id"] for x in one["data"]] == [f["id"]] and one["has_more"]
        rest = (await c.get(f"/v1/files?order=asc&after={f['id']}", headers=ALICE)).json()
        assert [x["id"] for x in rest["data"]] == [second["id"]]
        batch = (await c.get("/v1/files?purpose=batch", headers=ALICE)).json()
        assert [x["id"] for x in batch["data"]] == [second["id"]]
        gone = await c.delete(f"/v1/files/{f['id']}", headers=ALICE)
        assert gone.json() == {"id": f["id"], "object": "file", "deleted": True}
        error(await c.get(f"/v1/files/{f['id']}", headers=ALICE), 404, "id")
        error(await c.get(f"/v1/files/{f['id']}/content", headers=ALICE), 404, "id")
        error(await c.delete(f"/v1/files/{f['id']}", headers=ALICE), 404, "id")


async def test_another_key_gets_404_everywhere() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport(), two_keys()) as c:
        f = (await upload(c)).json()
        for method, path in (("GET", f"/v1/files/{f['id']}"), ("GET", f"/v1/files/{f['id']}/content"),
                             ("DELETE", f"/v1/files/{f['id']}")):
            error(await c.request(method, path, headers=BOB), 404, "id")
        assert (await c.get("/v1/files", headers=BOB)).json()["data"] == []
        error(await c.get(f"/v1/files?after={f['id']}", headers=BOB), 404, "after")
        assert (await c.get(f"/v1/files/{f['id']}", headers=ALICE)).status_code == 200  # still there
        assert (await c.get("/v1/files", headers={})).status_code == 401


async def test_bad_uploads_name_the_parameter() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport(), two_keys(max_bytes=1000)) as c:
        error(await upload(c, purpose="nonsense"), 400, "purpose", "invalid_value")
        error(await c.post("/v1/files", headers=ALICE, files={"purpose": (None, "batch")}), 400, "file",
              "missing_required_parameter")
        error(await c.post("/v1/files", headers=ALICE, files={"file": ("a.txt", b"x")}), 400, "purpose",
              "missing_required_parameter")
        error(await c.post("/v1/files", headers=ALICE, json={"purpose": "batch"}), 400, "file")
        error(await upload(c, b"x" * 1001), 413, "file", "file_too_large")
        error(await upload(c, **{"expires_after[anchor]": "created_at",
                                 "expires_after[seconds]": "10"}), 400, "expires_after.seconds")
        error(await upload(c, **{"expires_after[anchor]": "last_active_at",
                                 "expires_after[seconds]": "3600"}), 400, "expires_after.anchor")
        ok = await upload(c, **{"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"})
        assert ok.json()["expires_at"] == ok.json()["created_at"] + 3600
        error(await c.get("/v1/files?purpose=nope", headers=ALICE), 400, "purpose")
        error(await c.get("/v1/files?limit=0", headers=ALICE), 400, "limit")
        listed = (await c.get("/v1/files", headers=ALICE)).json()["data"]
        assert [f["id"] for f in listed] == [ok.json()["id"]]


async def test_the_sdk_end_to_end() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport(), two_keys()) as c:
        sdk = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="alice", http_client=c,
                                 max_retries=0)
        created = await sdk.files.create(file=("data.jsonl", io.BytesIO(b'{"a": 1}\n')), purpose="batch",
                                         expires_after={"anchor": "created_at", "seconds": 7200})
        assert created.purpose == "batch" and created.bytes == 9 and created.filename == "data.jsonl"
        assert created.expires_at == created.created_at + 7200
        assert (await sdk.files.retrieve(created.id)).id == created.id
        assert [f.id async for f in sdk.files.list(purpose="batch")] == [created.id]
        assert (await sdk.files.content(created.id)).content == b'{"a": 1}\n'
        assert (await sdk.files.delete(created.id)).deleted
        with pytest.raises(openai.NotFoundError):
            await sdk.files.retrieve(created.id)
        with pytest.raises(openai.BadRequestError) as bad:
            await sdk.files.create(file=("x.txt", b"x"), purpose="nope")  # type: ignore[arg-type]
        assert bad.value.body["param"] == "purpose"  # type: ignore[index]


async def test_on_postgresql_every_replica_sees_the_bytes() -> None:
    """Two apps (replicas) on one PostgreSQL: uploaded on one, read and deleted on the other."""
    from tests.support.postgres import fresh_database, postgres_server

    with postgres_server() as server:
        url = await fresh_database(server)
        cfg = two_keys()
        cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"url": url})})
        data = bytes(range(256)) * 9000  # > 2 chunk rows
        async with gateway(FakeLlamaCpp(ANSWER).transport(), cfg) as a, \
                gateway(FakeLlamaCpp(ANSWER).transport(), cfg) as b:
            f = (await upload(a, data, "big.bin")).json()
            assert f["bytes"] == len(data)
            assert (await b.get(f"/v1/files/{f['id']}/content", headers=ALICE)).content == data
            error(await b.get(f"/v1/files/{f['id']}", headers=BOB), 404, "id")
            assert (await b.delete(f"/v1/files/{f['id']}", headers=ALICE)).json()["deleted"]
            error(await a.get(f"/v1/files/{f['id']}", headers=ALICE), 404, "id")
