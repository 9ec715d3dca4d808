"""The Batch API as the OpenAI SDK drives it, on a fake llama.cpp: upload a JSONL, create,
poll, download; the output file has one line per ``custom_id`` with the same body the live
route gives; a line the live route refuses has the same status and body in the error file;
a bad input file fails with line-numbered errors and no request run; cancel; another key's
batch (and input file) is a 404."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import orjson
import pytest

from app.config import GatewayConfig
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, alice_and_bob, gateway
from tests.support.polling import until

ANSWER = "<|channel|>final<|message|>Hello from the batch.<|return|>"


def keys(**batches: Any) -> GatewayConfig:
    return alice_and_bob(batches={"poll_seconds": 0.05, "backoff_seconds": 0.05, **batches})


def sdk(c: httpx.AsyncClient, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=key, http_client=c,  # type: ignore[arg-type]
                              max_retries=0)


def jsonl(lines: list[Any]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def chat_line(custom_id: str, text: str = "Hi", **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": [{"role": "user", "content": text}], **body}}


async def finished(client: openai.AsyncOpenAI, batch_id: str, seconds: float = 30.0) -> Any:
    """The batch once it is final (a loaded CI machine runs a batch slowly: a generous bound,
    which only a stuck batch reaches)."""
    return await until(lambda: client.batches.retrieve(batch_id),
                       lambda b: b.status in ("completed", "failed", "expired", "cancelled"),
                       seconds=seconds)


async def lines_of(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [orjson.loads(line) for line in content.content.splitlines() if line.strip()]


async def test_a_chat_batch_through_the_sdk_matches_the_live_answers() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), keys()) as c:
        alice = sdk(c, "alice")
        lines = [chat_line(f"req-{i}", f"Question {i}") for i in range(12)]
        lines.append(chat_line("bad-temp", max_tokens=100_000))  # schema-valid; the route: 400
        up_file = await alice.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await alice.batches.create(input_file_id=up_file.id, endpoint="/v1/chat/completions",
                                           completion_window="24h", metadata={"job": "t1"})
        assert batch.status == "validating" and batch.metadata == {"job": "t1"}
        done = await finished(alice, batch.id)
        assert done.status == "completed", done
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed,
                done.request_counts.failed) == (13, 12, 1)
        assert done.model == MODEL and done.completed_at and done.in_progress_at
        assert done.usage is not None and done.usage.output_tokens > 0
        out = await lines_of(alice, done.output_file_id)
        assert sorted(line["custom_id"] for line in out) == sorted(f"req-{i}" for i in range(12))
        first = out[0]
        assert first["error"] is None and first["id"].startswith("batch_req_")
        assert first["response"]["status_code"] == 200
        assert first["response"]["body"]["choices"][0]["message"]["content"] == "Hello from the batch."
        errors = await lines_of(alice, done.error_file_id)
        assert [e["custom_id"] for e in errors] == ["bad-temp"]
        live = await c.post("/v1/chat/completions", headers={"authorization": "Bearer alice"},
                            json=lines[-1]["body"])
        assert errors[0]["response"]["status_code"] == live.status_code == 400
        assert errors[0]["response"]["body"] == live.json()
        meta = await alice.files.retrieve(done.output_file_id or "")
        assert meta.purpose == "batch_output" and meta.filename == f"{batch.id}_output.jsonl"
        # bob sees none of it
        bob = sdk(c, "bob")
        with pytest.raises(openai.NotFoundError):
            await bob.batches.retrieve(batch.id)
        with pytest.raises(openai.NotFoundError):
            await bob.batches.cancel(batch.id)
        with pytest.raises(openai.NotFoundError):
            await bob.batches.create(input_file_id=up_file.id, endpoint="/v1/chat/completions",
                                     completion_window="24h")
        assert [b.id async for b in bob.batches.list()] == []
        assert [b.id async for b in alice.batches.list()] == [batch.id]


async def test_a_bad_input_file_fails_with_numbered_errors_and_runs_nothing() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), keys()) as c:
        alice = sdk(c, "alice")
        raw = b"\n".join([
            orjson.dumps(chat_line("a")),
            b"{not json",
            orjson.dumps(chat_line("a")),  # duplicate custom_id
            orjson.dumps({**chat_line("c"), "url": "/v1/responses"}),
            orjson.dumps({**chat_line("d"), "body": {"model": MODEL}}),  # no messages
            orjson.dumps(chat_line("e", model="no-such-model")),
            b"",
            orjson.dumps(chat_line("f", stream=True)),
        ]) + b"\n"
        f = await alice.files.create(file=("bad.jsonl", raw), purpose="batch")
        batch = await alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h")
        done = await finished(alice, batch.id)
        assert done.status == "failed" and done.failed_at
        assert done.errors is not None and done.errors.data is not None
        found = [(e.line, e.code) for e in done.errors.data]
        assert found == [(2, "invalid_json_line"), (3, "duplicate_custom_id"), (4, "mismatched_endpoint"),
                         (5, "invalid_request"), (6, "model_not_found"), (8, "invalid_request")]
        assert done.errors.data[3].param == "body.messages"
        assert up.requests == []  # no request ran


async def test_create_is_checked_like_openai() -> None:
    async with gateway(FakeLlamaCpp(ANSWER).transport(), keys()) as c:
        alice = sdk(c, "alice")
        f = await alice.files.create(file=("x.txt", b"hello"), purpose="user_data")
        with pytest.raises(openai.BadRequestError) as bad:
            await alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                       completion_window="24h")
        assert bad.value.body["param"] == "input_file_id"  # type: ignore[index]
        for body in ({"input_file_id": f.id, "endpoint": "/v1/moderations", "completion_window": "24h"},
                     {"input_file_id": f.id, "endpoint": "/v1/responses", "completion_window": "48h"},
                     {"input_file_id": f.id, "endpoint": "/v1/responses", "completion_window": "24h",
                      "metadata": {str(i): "v" for i in range(17)}}):
            r = await c.post("/v1/batches", json=body, headers={"authorization": "Bearer alice"})
            assert r.status_code == 400, r.text
        with pytest.raises(openai.NotFoundError):
            await alice.batches.create(input_file_id="file-nope", endpoint="/v1/responses",
                                       completion_window="24h")


async def test_cancel_stops_the_lines_in_flight_and_keeps_what_completed() -> None:
    gate = asyncio.Event()
    seen: list[str] = []
    plain = FakeLlamaCpp(ANSWER)

    async def slow(request: httpx.Request) -> httpx.Response:
        text = orjson.loads(request.content)["prompt"]
        seen.append(str(text))
        if len(seen) > 2:
            await gate.wait()  # every line after the second hangs until cancelled
        return plain(request)

    async with gateway(httpx.MockTransport(slow), keys(share=1.0)) as c:
        alice = sdk(c, "alice")
        f = await alice.files.create(file=("in.jsonl", jsonl([chat_line(f"r{i}") for i in range(6)])),
                                     purpose="batch")
        batch = await alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h")
        await until(lambda: alice.batches.retrieve(batch.id),
                    lambda b: b.request_counts is not None and b.request_counts.completed >= 2)
        cancelling = await alice.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled")
        done = await finished(alice, batch.id)
        assert done.status == "cancelled" and done.cancelled_at and done.cancelling_at
        out = await lines_of(alice, done.output_file_id)
        assert len(out) == 2
        errors = await lines_of(alice, done.error_file_id)
        assert len(errors) == 4 and {e["error"]["code"] for e in errors} == {"batch_cancelled"}
        assert {line["custom_id"] for line in out + errors} == {f"r{i}" for i in range(6)}


async def test_batch_tokens_count_against_the_keys_budget() -> None:
    """A key's token budget covers its batch lines (they run as the key, through the same
    limits): once spent, the next lines get the live route's 429 ``insufficient_quota``, in the
    error file, and nothing more reaches the model."""
    up = FakeLlamaCpp(ANSWER)
    base = keys(share=0.001, max_attempts=1).model_dump()  # one line at a time, no retries
    base["auth"]["keys"][0]["budget"] = {"tokens": 10, "period": "total"}
    async with gateway(up.transport(), GatewayConfig.model_validate(base)) as c:
        alice = sdk(c, "alice")
        f = await alice.files.create(file=("in.jsonl", jsonl([chat_line(f"r{i}") for i in range(4)])),
                                     purpose="batch")
        batch = await alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h")
        done = await finished(alice, batch.id)
        assert done.status == "completed" and done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (1, 3)
        errors = await lines_of(alice, done.error_file_id)
        assert {e["response"]["status_code"] for e in errors} == {429}
        assert {e["response"]["body"]["error"]["code"] for e in errors} == {"insufficient_quota"}
        assert len(up.requests) == 1
        live = await c.post("/v1/chat/completions", headers={"authorization": "Bearer alice"},
                            json=chat_line("x")["body"])
        assert live.status_code == 429 and live.json() == errors[0]["response"]["body"]
