"""How the gateway's own cost grows with the work (issue 40, item 4): nothing accidentally quadratic.

``python -m benchmarks.scale_curves [--preset full|quick] [--json FILE]`` runs the gateway in process (its
lifespan, stores and middleware; no uvicorn) against an in-memory upstream that answers every
generation with the recorded llama.cpp Harmony stream ``03a_completion_tokenids_stream`` (from
``../shared/wire``, a real llama.cpp server's answer), and measures the process CPU time
(``time.process_time``: the event loop and the worker threads that count and render) per request
along four axes:

* **prompt size**: a chat history of 1k → 100k tokens (Harmony, non-stream): CPU per request and
  per 1,000 prompt tokens (flat = linear);
* **tool count**: 0 → 200 function tools on a one-line chat: CPU per request and per tool;
* **stored-chain depth**: ``/v1/responses`` turns chained by ``previous_response_id`` (store on,
  SQLite file): the CPU of turn *k* for *k* = 1 … 200, and per 1,000 tokens of the context it
  re-renders (each turn's prompt holds the whole chain, so a turn's cost grows with *k*; per
  token of context it must stay flat);
* **concurrent streams**: *n* = 1 → 5,000 streamed chat requests started at once: CPU per
  request (flat = nothing per-stream is scanned per event) and the wall time of the burst.

The in-process client's own CPU (httpx over ASGI) is included in every number, the same at each
point, so ratios along an axis are what to read, not the absolute values.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from app.config import GatewayConfig
from app.main import create_app
from tests.support.wire import load, recorded_response

Json = dict[str, Any]
MODEL = "scale-model"
WORDS_PER_MESSAGE = 100  # ~100 o200k tokens: "w0 w1 ..." words are one token each with their space


def _config(store_path: str) -> GatewayConfig:
    return GatewayConfig.model_validate({
        "store": {"path": store_path},
        "limits": {"max_inflight": 10_000, "max_queue": 10_000, "max_body_bytes": 64 << 20},
        "upstream": {"max_connections": 10_000},
        "models": {MODEL: {"backend": "llamacpp", "base_urls": ["http://llama.test:8080"],
                           "context_window": 1_000_000, "harmony": {"current_date": "2026-11-22"}}}})


SENT: list[int] = [0]  # the prompt length (token ids) of the last generation sent upstream


def _upstream() -> httpx.MockTransport:
    record = load("03a_completion_tokenids_stream")

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return httpx.Response(404)
        prompt = json.loads(request.content).get("prompt")
        SENT[0] = len(prompt) if isinstance(prompt, list) else 0
        return recorded_response(record)

    return httpx.MockTransport(handle)


def _history(tokens: int) -> list[Json]:
    messages: list[Json] = []
    for i in range(max(1, tokens // WORDS_PER_MESSAGE)):
        text = " ".join(f"w{(i * 7 + j) % 500}" for j in range(WORDS_PER_MESSAGE))
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "and now?"})
    return messages


def _tools(n: int) -> list[Json]:
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool number {i}: looks something up.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                         "days": {"type": "integer"}},
                       "required": ["city"]}}} for i in range(n)]


async def _cpu(run: Callable[[], Awaitable[None]], repeat: int) -> float:
    """Median process CPU seconds of ``run`` over ``repeat`` calls (one warm-up first)."""
    await run()
    samples = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        await run()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


async def prompt_size(client: httpx.AsyncClient, sizes: list[int]) -> list[Json]:
    rows = []
    for tokens in sizes:
        body = {"model": MODEL, "messages": _history(tokens), "max_tokens": 80}

        async def one(body: Json = body) -> None:
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text[:300]

        cpu = await _cpu(one, max(3, 200_000 // max(tokens, 1) // 10))
        rows.append({"prompt_tokens": tokens, "cpu_ms": round(cpu * 1000, 2),
                     "cpu_ms_per_1k_tokens": round(cpu * 1000 / (tokens / 1000), 3)})
    return rows


async def tool_count(client: httpx.AsyncClient, counts: list[int]) -> list[Json]:
    rows = []
    for n in counts:
        body: Json = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}],
                      "max_tokens": 80}
        if n:
            body["tools"] = _tools(n)

        async def one(body: Json = body) -> None:
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text[:300]

        cpu = await _cpu(one, 15)
        rows.append({"tools": n, "cpu_ms": round(cpu * 1000, 2),
                     "cpu_ms_per_tool": round(cpu * 1000 / n, 4) if n else None})
    return rows


async def chain_depth(client: httpx.AsyncClient, depths: list[int]) -> list[Json]:
    """Turn k's CPU: the median of the 5 turns ending at k (one turn is one sample)."""
    rows, previous, marks, cpus = [], None, set(depths), []
    warm = await client.post("/v1/responses", json={"model": MODEL, "input": "warm up", "store": True})
    assert warm.status_code == 200, warm.text[:300]
    for k in range(1, max(depths) + 1):
        body: Json = {"model": MODEL, "input": f"turn {k}: " + " ".join(f"w{j}" for j in range(40)),
                      "max_output_tokens": 80, "store": True}
        if previous:
            body["previous_response_id"] = previous
        gc.collect()
        start = time.process_time()
        r = await client.post("/v1/responses", json=body)
        cpus.append(time.process_time() - start)
        assert r.status_code == 200, r.text[:300]
        previous = r.json()["id"]
        if k in marks:
            cpu, context = statistics.median(cpus[-5:]), SENT[0]
            rows.append({"depth": k, "prompt_tokens": context, "cpu_ms": round(cpu * 1000, 2),
                         "cpu_ms_per_1k_prompt": round(cpu * 1000 / (context / 1000), 3)})
    return rows


async def concurrent_streams(client: httpx.AsyncClient, counts: list[int]) -> list[Json]:
    rows = []
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": 80}

    async def stream() -> None:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            async for _ in r.aiter_raw():
                pass

    for n in counts:
        await asyncio.gather(*(stream() for _ in range(min(n, 50))))  # warm-up
        gc.collect()
        start, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(n)))
        cpu, wall = time.process_time() - start, time.perf_counter() - wall
        rows.append({"streams": n, "cpu_ms_per_stream": round(cpu * 1000 / n, 3),
                     "burst_wall_s": round(wall, 2)})
    return rows


def _table(title: str, rows: list[Json]) -> str:
    head = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join("–" if r[h] is None else f"{r[h]:,}" if isinstance(r[h], int)
                               else str(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


POINTS: dict[str, dict[str, list[int]]] = {
    "full": {"prompt_size": [1_000, 3_000, 10_000, 30_000, 100_000], "tool_count": [0, 10, 50, 100, 200],
             "chain_depth": [1, 10, 50, 100, 200], "concurrent_streams": [1, 100, 1_000, 5_000]},
    "quick": {"prompt_size": [1_000, 10_000, 30_000], "tool_count": [0, 10, 50],
              "chain_depth": [1, 10, 30], "concurrent_streams": [1, 100, 500]},
    "tiny": {"prompt_size": [1_000, 2_000], "tool_count": [0, 5], "chain_depth": [1, 3],
             "concurrent_streams": [1, 5]},  # the test of this benchmark
}
AXES = {"prompt_size": prompt_size, "tool_count": tool_count, "chain_depth": chain_depth,
        "concurrent_streams": concurrent_streams}


async def main(preset: str = "full") -> Json:
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(_config(str(Path(tmp) / "store.sqlite3")), transport=_upstream())
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gateway", timeout=600) as client:
            return {axis: await run(client, POINTS[preset][axis]) for axis, run in AXES.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(POINTS), default="full", help="which points to run")
    parser.add_argument("--json", type=Path, help="write every number here too")
    args = parser.parse_args()
    result = asyncio.run(main(args.preset))
    for name, rows in result.items():
        sys.stdout.write(_table(name.replace("_", " "), rows) + "\n")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
