"""The Batch API against a fast fake upstream: batch throughput, and interactive latency beside it.

``python -m benchmarks.batches [--lines 1000] [--seconds 8] [--out benchmarks/results/batches]``
starts the overhead benchmark's fake llama.cpp (:mod:`benchmarks.overhead.fake`: ``--tokens``
answer tokens after ``--ttft`` seconds) and a real ``ocm-gateway serve`` of this checkout on a
SQLite file, with ``[limits] max_inflight`` and ``[batches] share`` (so the worker's slots are
``int(max_inflight * share)``), then measures:

1. **batch throughput**: a ``--lines`` chat batch uploaded through ``/v1/files``, created, and
   polled every 20 ms until ``completed``: requests/s and tokens/s from creation to completion
   (validation included) — against **the same requests sent by a client** at the batch's
   concurrency (its slots), each on its own keep-alive connection;
2. **interactive latency** (non-stream chat, ``--seconds`` per run, after a warm-up, each setting
   ``--repeat`` times interleaved without and with the batch, and the medians): p50 / p99
   of closed-loop clients at a light concurrency (``--light``, fewer than the interactive slots)
   and at ``max_inflight`` (so requests queue and the worker's ``busy()`` yield matters), each
   without a batch and then with a large batch running (cancelled afterwards); the batch lines
   completed during the run are reported too.

Results: a Markdown table and JSON beside ``--out``, with ``uptime``'s load before and after
(the machine is shared: read the numbers as this load's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from benchmarks.overhead.processes import Fake, harmony_model, start_fake, start_gateway
from benchmarks.overhead.targets import HARMONY_MODEL
from benchmarks.overhead.trees import Tree

ROOT = Path(__file__).resolve().parents[1]
Json = dict[str, Any]


def body(i: int) -> Json:
    return {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": f"Question {i}: say hello."}]}


def _config(port: int, fake: Fake, store: Path, max_inflight: int, share: float) -> str:
    return f"""\
host = "127.0.0.1"
port = {port}
[store]
path = "{store}"
[limits]
max_inflight = {max_inflight}
[batches]
share = {share}
poll_seconds = 0.2
{harmony_model(fake, "2026-11-28")}"""


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _tokens(answer: Json) -> int:
    usage = answer.get("usage") or {}
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


async def _start_batch(c: httpx.AsyncClient, lines: int, offset: int = 0) -> str:
    raw = b"".join(orjson.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": body(offset + i)}) + b"\n" for i in range(lines))
    f = (await c.post("/v1/files", files={"file": ("in.jsonl", raw)}, data={"purpose": "batch"})).json()
    batch = (await c.post("/v1/batches", json={"input_file_id": f["id"], "completion_window": "24h",
                                               "endpoint": "/v1/chat/completions"})).json()
    return str(batch["id"])


async def _poll(c: httpx.AsyncClient, batch_id: str, until: tuple[str, ...]) -> Json:
    while True:
        found: Json = (await c.get(f"/v1/batches/{batch_id}")).json()
        if found["status"] in until:
            return found
        await asyncio.sleep(0.02)


async def batch_throughput(url: str, lines: int) -> Json:
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        t0 = time.perf_counter()
        batch_id = await _start_batch(c, lines)
        running = await _poll(c, batch_id, ("in_progress", "completed", "failed"))
        t1 = time.perf_counter()
        done = await _poll(c, batch_id, ("completed", "failed", "expired", "cancelled"))
        t2 = time.perf_counter()
    assert done["status"] == "completed", done
    counts = done["request_counts"]
    assert counts["completed"] == lines, counts
    tokens = int(done["usage"]["total_tokens"])
    del running
    return {"what": "batch", "requests": lines, "seconds": round(t2 - t0, 3),
            "validation_seconds": round(t1 - t0, 3), "requests_per_s": round(lines / (t2 - t0), 1),
            "tokens_per_s": round(tokens / (t2 - t0), 1)}


async def client_throughput(url: str, lines: int, concurrency: int, offset: int) -> Json:
    todo = iter(range(offset, offset + lines))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        async with httpx.AsyncClient(base_url=url, timeout=600) as c:
            for i in todo:
                r = await c.post("/v1/chat/completions", json=body(i))
                assert r.status_code == 200, r.text
                tokens += _tokens(r.json())

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    return {"what": f"client, concurrency {concurrency}", "requests": lines,
            "seconds": round(seconds, 3), "requests_per_s": round(lines / seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1)}


async def interactive(url: str, concurrency: int, seconds: float, with_batch: int) -> Json:
    """Closed-loop clients for ``seconds`` (after 1 s of warm-up); with ``with_batch`` lines
    running meanwhile (a batch made first, measured once it is in progress, then cancelled)."""
    latencies: list[float] = []
    errors = 0
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        batch_id = None
        before = 0
        if with_batch:
            batch_id = await _start_batch(c, with_batch, offset=10_000_000)
            await _poll(c, batch_id, ("in_progress",))
        stop_at = time.perf_counter() + 1.0 + seconds
        measure_from = time.perf_counter() + 1.0

        async def user(n: int) -> None:
            nonlocal errors
            async with httpx.AsyncClient(base_url=url, timeout=600) as mine:
                i = 0
                while time.perf_counter() < stop_at:
                    t = time.perf_counter()
                    r = await mine.post("/v1/chat/completions", json=body(1_000_000 * (n + 1) + i))
                    took = time.perf_counter() - t
                    i += 1
                    if r.status_code != 200:
                        errors += 1
                    elif t >= measure_from:
                        latencies.append(took)

        if batch_id is not None:
            await asyncio.sleep(0)
        users = [asyncio.create_task(user(n)) for n in range(concurrency)]
        await asyncio.sleep(1.0)
        if batch_id is not None:
            before = (await c.get(f"/v1/batches/{batch_id}")).json()["request_counts"]["completed"]
        await asyncio.gather(*users)
        during = 0
        status = "-"
        if batch_id is not None:
            found = (await c.get(f"/v1/batches/{batch_id}")).json()
            during, status = found["request_counts"]["completed"] - before, found["status"]
            await c.post(f"/v1/batches/{batch_id}/cancel")
            await _poll(c, batch_id, ("cancelled", "completed"))
    latencies.sort()
    return {"concurrency": concurrency, "batch": bool(with_batch), "requests": len(latencies),
            "errors": errors, "p50_ms": round(statistics.median(latencies) * 1000, 1),
            "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1),
            "batch_lines_per_s": round(during / seconds, 1) if with_batch else None,
            "batch_status_after": status}


async def measure(url: str, args: argparse.Namespace, slots: int) -> Json:
    out: Json = {"throughput": [], "latency": []}
    await client_throughput(url, min(200, args.lines), slots, 9_000_000)  # warm-up
    # each run asks requests the fake has not seen (it caches an answer per body)
    out["throughput"] = [await batch_throughput(url, args.lines),
                         await client_throughput(url, args.lines, slots, 5_000_000)]
    for concurrency in (args.light, args.max_inflight):
        for _ in range(args.repeat):  # interleaved, so a change in the machine's load hits both
            for with_batch in (0, args.big):
                out["latency"].append(await interactive(url, concurrency, args.seconds, with_batch))
    return out


def _medians(result: Json) -> list[Json]:
    """Per (concurrency, batch): the median over the repeats of p50, p99 and batch lines/s."""
    groups: dict[tuple[int, bool], list[Json]] = {}
    for r in result["latency"]:
        groups.setdefault((r["concurrency"], r["batch"]), []).append(r)
    return [{"concurrency": c, "batch": b, "runs": len(rs),
             "p50_ms": statistics.median(r["p50_ms"] for r in rs),
             "p99_ms": statistics.median(r["p99_ms"] for r in rs),
             "batch_lines_per_s": statistics.median(r["batch_lines_per_s"] for r in rs) if b else None}
            for (c, b), rs in groups.items()]


def _table(result: Json) -> str:
    rows = ["| run | requests | seconds | requests/s | tokens/s |", "|---|---|---|---|---|"]
    for t in result["throughput"]:
        label = t["what"] + (f" (validation {t['validation_seconds']} s)"
                             if "validation_seconds" in t else "")
        rows.append(f"| {label} | {t['requests']} | {t['seconds']} | {t['requests_per_s']} | "
                    f"{t['tokens_per_s']} |")
    rows += ["", "| interactive concurrency | batch running | requests | errors | p50 ms | p99 ms | "
             "batch lines/s meanwhile |", "|---|---|---|---|---|---|---|"]
    for r in result["latency"]:
        rows.append(f"| {r['concurrency']} | {'yes' if r['batch'] else 'no'} | {r['requests']} | "
                    f"{r['errors']} | {r['p50_ms']} | {r['p99_ms']} | "
                    f"{r['batch_lines_per_s'] if r['batch'] else '-'} |")
    rows += ["", "Medians over the repeats:", "",
             "| interactive concurrency | batch running | runs | p50 ms | p99 ms | batch lines/s |",
             "|---|---|---|---|---|---|"]
    for m in result["medians"]:
        rows.append(f"| {m['concurrency']} | {'yes' if m['batch'] else 'no'} | {m['runs']} | "
                    f"{m['p50_ms']} | {m['p99_ms']} | {m['batch_lines_per_s'] if m['batch'] else '-'} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1000, help="lines of the throughput batch")
    parser.add_argument("--big", type=int, default=20000, help="lines of the batch beside interactive runs")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each interactive run")
    parser.add_argument("--repeat", type=int, default=3, help="interactive runs per setting")
    parser.add_argument("--max-inflight", type=int, default=16)
    parser.add_argument("--share", type=float, default=0.25)
    parser.add_argument("--light", type=int, default=4, help="the light interactive concurrency")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft", type=float, default=0.02)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "batches"))
    args = parser.parse_args(argv)
    slots = max(1, int(args.max_inflight * args.share))
    load_before = _uptime()
    here = Tree("here", ROOT, "app.cli.main:main")
    with tempfile.TemporaryDirectory() as tmp, start_fake(args.tokens, args.ttft, 0.0, here) as fake, \
            start_gateway(fake, here, Path(tmp), "warning", lambda port: _config(
                port, fake, Path(tmp) / "store.sqlite3", args.max_inflight, args.share)) as gateway:
        result = asyncio.run(measure(gateway.url, args, slots))
    result["medians"] = _medians(result)
    result.update(settings={k: v for k, v in vars(args).items() if k != "out"}, slots=slots,
                  cpus=os.cpu_count(), load_before=load_before, load_after=_uptime())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    table = _table(result)
    out.with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"slots {slots}; load before: {load_before}; after: {result['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
