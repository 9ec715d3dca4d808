"""Batches of the other endpoints and what a user sees around them, on a fake llama.cpp:
``/v1/embeddings`` and ``/v1/messages`` lines answer as the same requests sent live; a batch's
usage is counted for its key as batch (model ``"m (batch)"``, a ``(batch)`` route label) apart
from the same key's live requests; a 200-line batch completes while interactive requests keep
being answered."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
import orjson

from app.config import GatewayConfig
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway
from tests.unit.api.batches.test_batches import ANSWER, chat_line, finished, jsonl, keys, lines_of, sdk

ALICE = {"authorization": "Bearer alice"}
ADMIN = "admin-secret"
EMBEDDING = {"object": "list", "model": "tiny", "usage": {"prompt_tokens": 3, "total_tokens": 3},
             "data": [{"object": "embedding", "index": 0, "embedding": [0.25, 2.0]}]}


def upstream(chat: FakeLlamaCpp, delay: float = 0.0) -> httpx.MockTransport:
    """``/v1/embeddings`` answers EMBEDDING (its vector from the input's length), the rest is
    the scripted completion — after ``delay`` seconds, so requests overlap."""
    async def handle(request: httpx.Request) -> httpx.Response:
        if delay:
            await asyncio.sleep(delay)
        if request.url.path == "/v1/embeddings":
            text = orjson.loads(request.content)["input"]
            size = float(len(text if isinstance(text, str) else text[0]))
            return httpx.Response(200, json={**EMBEDDING, "data": [
                {"object": "embedding", "index": 0, "embedding": [size, -size]}]})
        return chat(request)

    return httpx.MockTransport(handle)


def line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


async def run_batch(c: httpx.AsyncClient, url: str, lines: list[dict[str, Any]]) -> Any:
    alice = sdk(c, "alice")
    f = await alice.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    batch = await alice.batches.create(input_file_id=f.id, endpoint=url,  # type: ignore[arg-type]
                                       completion_window="24h")
    done = await finished(alice, batch.id)
    assert done.status == "completed", done
    return done, {o["custom_id"]: o for o in await lines_of(alice, done.output_file_id)}


async def test_an_embeddings_batch_answers_as_the_live_route() -> None:
    async with gateway(upstream(FakeLlamaCpp(ANSWER)), keys()) as c:
        texts = ["a", "bb", "ccc", "dddd"]
        lines = [line(f"e{i}", "/v1/embeddings", {"model": MODEL, "input": t})
                 for i, t in enumerate(texts)]
        done, out = await run_batch(c, "/v1/embeddings", lines)
        assert done.request_counts.completed == 4 and done.error_file_id is None
        for i, text in enumerate(texts):
            live = await c.post("/v1/embeddings", headers=ALICE, json={"model": MODEL, "input": text})
            assert live.status_code == 200
            assert out[f"e{i}"]["response"]["body"] == live.json()
            assert out[f"e{i}"]["response"]["body"]["data"][0]["embedding"] == [len(text), -len(text)]
        assert done.usage.input_tokens == 4 * 3


async def test_a_messages_batch_answers_as_the_live_route() -> None:
    async with gateway(upstream(FakeLlamaCpp(ANSWER)), keys()) as c:
        body = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}
        lines = [line(f"m{i}", "/v1/messages", body) for i in range(3)]
        done, out = await run_batch(c, "/v1/messages", lines)
        live = await c.post("/v1/messages", headers=ALICE, json=body)
        assert live.status_code == 200
        want = live.json()
        for i in range(3):
            got = out[f"m{i}"]["response"]["body"]
            assert got["type"] == "message" and got["id"].startswith("msg_")
            assert {k: v for k, v in got.items() if k != "id"} == {
                k: v for k, v in want.items() if k != "id"}
            assert got["content"][-1] == {"type": "text", "text": "Hello from the batch."}
        assert done.usage.input_tokens == 3 * want["usage"]["input_tokens"]


def admin_keys() -> GatewayConfig:
    cfg = keys()
    return cfg.model_copy(update={"admin": cfg.admin.model_copy(update={
        "key_sha256": hashlib.sha256(ADMIN.encode()).hexdigest()})})


async def test_batch_usage_is_counted_as_batch_for_the_key() -> None:
    async with gateway(upstream(FakeLlamaCpp(ANSWER)), admin_keys()) as c:
        done, out = await run_batch(c, "/v1/chat/completions",
                                    [chat_line(f"r{i}") for i in range(5)])
        live = await c.post("/v1/chat/completions", headers=ALICE, json=chat_line("x")["body"])
        assert live.status_code == 200
        r = await c.get("/admin/usage", headers={"authorization": f"Bearer {ADMIN}"},
                        params={"group_by": "key,model"})
        assert r.status_code == 200, r.text
        rows = {(row["key"], row["model"]): row for row in r.json()["data"]}
        batch_row, live_row = rows[("alice", f"{MODEL} (batch)")], rows[("alice", MODEL)]
        assert batch_row["requests"] == 5 and live_row["requests"] == 1
        per_line = out["r0"]["response"]["body"]["usage"]
        assert batch_row["output_tokens"] == 5 * per_line["completion_tokens"] > 0
        assert batch_row["input_tokens"] == done.usage.input_tokens
        assert live_row["output_tokens"] == live.json()["usage"]["completion_tokens"]
        metrics = (await c.get("/metrics")).text
        assert (f'ocm_requests_total{{model="{MODEL}",route="/v1/chat/completions (batch)",'
                f'status="200"}} 5.0') in metrics
        assert (f'ocm_requests_total{{model="{MODEL}",route="/v1/chat/completions",'
                f'status="200"}} 1.0') in metrics


async def test_a_200_line_batch_completes_while_interactive_requests_keep_being_answered() -> None:
    chat = FakeLlamaCpp(ANSWER)
    async with gateway(upstream(chat, delay=0.005), keys()) as c:
        alice = sdk(c, "alice")
        f = await alice.files.create(file=("in.jsonl", jsonl([chat_line(f"b{i}", f"Q{i}")
                                                               for i in range(200)])),
                                     purpose="batch")
        batch = await alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h")
        statuses: list[int] = []
        stop = asyncio.Event()

        async def interactive() -> None:
            while not stop.is_set():
                r = await c.post("/v1/chat/completions", headers=ALICE,
                                 json=chat_line("i", "Live question")["body"])
                statuses.append(r.status_code)
                assert r.json()["choices"][0]["message"]["content"] == "Hello from the batch."

        users = [asyncio.create_task(interactive()) for _ in range(4)]
        try:
            done = await finished(alice, batch.id, seconds=120)
            seen_during = len(statuses)
        finally:
            stop.set()
            await asyncio.gather(*users)
        assert done.status == "completed"
        assert (done.request_counts.completed, done.request_counts.failed) == (200, 0)
        out = await lines_of(alice, done.output_file_id)
        assert sorted(o["custom_id"] for o in out) == sorted(f"b{i}" for i in range(200))
        assert seen_during >= 20 and set(statuses) == {200}
