"""The Batch API as a user meets it: the OpenAI SDK against ``ocm-gateway serve`` on real
llama.cpp servers (scripted GGUF models).  A batch of ``/v1/chat/completions`` and one of
``/v1/responses`` with a ``text.format`` json_schema answer exactly as the same requests sent
live (at temperature 0 the scripted model is deterministic; ids and timestamps aside); a batch
cancelled mid-run ends ``cancelled`` with what completed in the output file, the rest in the
error file, every ``custom_id`` once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from openai import OpenAI

pytestmark = pytest.mark.integration
FINAL = ("completed", "failed", "expired", "cancelled")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
# ids and timestamps differ between two runs of a request, and so does cached_tokens: the
# second run of a prompt finds it in llama.cpp's prompt cache
VOLATILE = {"id", "created", "created_at", "completed_at", "system_fingerprint", "cached_tokens"}


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="not-needed", max_retries=0, timeout=120)


def run(c: OpenAI, endpoint: str, bodies: dict[str, dict[str, Any]]) -> Any:
    raw = b"".join(orjson.dumps({"custom_id": cid, "method": "POST", "url": endpoint, "body": body})
                   + b"\n" for cid, body in bodies.items())
    f = c.files.create(file=("requests.jsonl", raw), purpose="batch")
    return c.batches.create(input_file_id=f.id, endpoint=endpoint,  # type: ignore[arg-type]
                            completion_window="24h", metadata={"suite": "integration"})


def wait(c: OpenAI, batch_id: str, ok: Callable[[Any], bool], seconds: float = 120) -> Any:
    deadline = time.monotonic() + seconds
    batch = c.batches.retrieve(batch_id)
    while not ok(batch):
        assert time.monotonic() < deadline, f"batch never reached the state: {batch}"
        time.sleep(0.1)
        batch = c.batches.retrieve(batch_id)
    return batch


def lines(c: OpenAI, file_id: str | None) -> dict[str, Any]:
    if file_id is None:
        return {}
    out = [orjson.loads(line) for line in c.files.content(file_id).content.splitlines() if line.strip()]
    found = {line["custom_id"]: line for line in out}
    assert len(found) == len(out), "a custom_id twice"
    return found


def stable(value: Any) -> Any:
    """``value`` without :data:`VOLATILE` fields."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def test_a_chat_batch_answers_as_the_same_requests_sent_live(gateway_url: str) -> None:
    c = client(gateway_url)
    bodies: dict[str, dict[str, Any]] = {f"chat-{i}": {"model": model, "temperature": 0, "max_tokens": 60,
                            "messages": [{"role": "user", "content": f"Say hello, number {i}."}]}
              for i, model in enumerate(["scripted-final", "scripted-reasoning"] * 3)}
    batch = run(c, "/v1/chat/completions", bodies)
    done = wait(c, batch.id, lambda b: b.status in FINAL)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 6, 0)
    assert done.metadata == {"suite": "integration"} and done.error_file_id is None
    out = lines(c, done.output_file_id)
    assert set(out) == set(bodies)
    for cid, body in bodies.items():
        live = c.chat.completions.with_raw_response.create(**body).http_response.json()
        line = out[cid]
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert stable(line["response"]["body"]) == stable(live)
    assert out["chat-0"]["response"]["body"]["choices"][0]["message"]["content"] == \
        "Hello from a scripted tiny model!"
    assert done.usage.output_tokens == sum(
        line["response"]["body"]["usage"]["completion_tokens"] for line in out.values())


def test_a_responses_batch_with_a_json_schema_answers_as_live(gateway_url: str) -> None:
    c = client(gateway_url)
    fmt = {"type": "json_schema", "name": "n", "schema": SCHEMA, "strict": True}
    bodies: dict[str, dict[str, Any]] = {
        f"resp-{i}": {"model": "scripted-reasoning", "temperature": 0, "max_output_tokens": 40,
                      "input": f"Say hello ({i}).", "text": {"format": fmt}, "store": False}
        for i in range(4)}
    batch = run(c, "/v1/responses", bodies)
    done = wait(c, batch.id, lambda b: b.status in FINAL)
    assert done.status == "completed", done
    out = lines(c, done.output_file_id)
    assert set(out) == set(bodies)
    for cid, body in bodies.items():
        live = c.responses.with_raw_response.create(**body).http_response.json()
        got = out[cid]["response"]["body"]
        assert got["object"] == "response" and got["status"] == live["status"]
        assert got["incomplete_details"] == live["incomplete_details"]  # the grammar's padding
        assert got["text"]["format"]["type"] == "json_schema"
        assert stable(got["output"]) == stable(live["output"])
        assert stable(got["usage"]) == stable(live["usage"])
        texts = [part["text"] for item in got["output"] if item["type"] == "message"
                 for part in item["content"] if part["type"] == "output_text"]
        assert len(texts) == 1 and texts[0].startswith('{"n"')


def test_cancel_mid_run_keeps_what_completed(gateway_url: str) -> None:
    c = client(gateway_url)
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
    # held to the grammar the scripted model pads to max_tokens: every line takes a while
    bodies = {f"slow-{i}": {"model": "scripted-reasoning", "temperature": 0, "max_tokens": 400,
                            "response_format": fmt,
                            "messages": [{"role": "user", "content": f"Say hello ({i})."}]}
              for i in range(60)}
    batch = run(c, "/v1/chat/completions", bodies)
    wait(c, batch.id, lambda b: b.request_counts is not None and b.request_counts.completed >= 2)
    cancelling = c.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait(c, batch.id, lambda b: b.status in FINAL)
    assert done.status == "cancelled" and done.cancelled_at and done.cancelling_at
    counts = done.request_counts
    assert counts.total == 60 and counts.completed + counts.failed == 60
    assert 2 <= counts.completed < 60
    out, errors = lines(c, done.output_file_id), lines(c, done.error_file_id)
    assert len(out) == counts.completed and set(out) | set(errors) == set(bodies)
    assert not set(out) & set(errors)
    assert {e["error"]["code"] for e in errors.values()} == {"batch_cancelled"}
    assert all(line["response"]["status_code"] == 200 for line in out.values())
    # the gateway is still answering, and the cancelled lines do not run on
    live = c.chat.completions.create(model="scripted-final", max_tokens=20,
                                     messages=[{"role": "user", "content": "Hi"}])
    assert live.choices[0].message.content == "Hello from a scripted tiny model!"
    time.sleep(1.0)
    after = c.batches.retrieve(batch.id).request_counts
    assert after is not None and after.completed == counts.completed
