"""Throughput and latency with 1, 2 and 3 replicas sharing PostgreSQL and Redis.

``python -m benchmarks.replicas [--seconds 5] [--rounds 2]``: the overhead benchmark's fake
llama.cpp (an 80-token Harmony answer at once), a throwaway PostgreSQL and Redis
(tests/support), and N ``ocm-gateway serve`` processes with ``[store] url`` and ``[redis] url``
and an API key with a (high) rate limit, so every request is stored in PostgreSQL and counted
in Redis.  The client spreads requests round robin over the replicas (as a load balancer
would, without one's own cost): ``/v1/responses`` non-streamed, ``store: true``; 200 requests
one at a time (p50), then ``--seconds`` at concurrency 32 (requests / s).  N = 1, 2, 3
interleaved per round; medians over rounds.  Everything shares this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from benchmarks.overhead.processes import start_fake
from benchmarks.overhead.targets import HARMONY_MODEL
from benchmarks.overhead.trees import ROOT, Tree
from tests.support.postgres import postgres_server
from tests.support.process import free_port, healthy_process
from tests.support.redis_server import redis_server

KEY = "sk-bench-replicas"


def _config(path: Path, port: int, llamacpp: str, pg: str, redis: str) -> Path:
    path.write_text("\n".join([
        'host = "127.0.0.1"', f"port = {port}", "",
        "[store]", f'path = "{path.with_suffix(".sqlite3")}"', f'url = "{pg}"', "",
        "[redis]", f'url = "{redis}"', "",
        "[[auth.keys]]", 'name = "bench"', f'sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"',
        "requests_per_minute = 1000000", "",
        f'[models."{HARMONY_MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{llamacpp}"]',
        'prompt_format = "harmony"', "context_window = 8192", ""]))
    return path


@contextlib.contextmanager
def replicas(n: int, workdir: Path, llamacpp: str, pg: str, redis: str) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        urls = []
        for i in range(n):
            port = free_port()
            cfg = _config(workdir / f"r{n}-{i}.toml", port, llamacpp, pg, redis)
            exe = Path(sys.executable).with_name("ocm-gateway")
            cmd = [str(exe), "serve", "--config", str(cfg), "--log-level", "warning"]
            stack.enter_context(healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=60))
            urls.append(f"http://127.0.0.1:{port}")
        yield urls


async def _measure(urls: list[str], seconds: float) -> dict[str, float]:
    body = {"model": HARMONY_MODEL, "input": "Hello", "store": True}
    headers = {"authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        latencies = []
        for i in range(200):
            t0 = time.perf_counter()
            r = await client.post(f"{urls[i % len(urls)]}/v1/responses", json=body, headers=headers)
            latencies.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
        done, deadline, counter = 0, time.monotonic() + seconds, iter(range(10**9))

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                r = await client.post(f"{urls[next(counter) % len(urls)]}/v1/responses", json=body,
                                      headers=headers)
                assert r.status_code == 200, r.text
                done += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(32)))
        elapsed = time.monotonic() - t0
    return {"p50_ms": statistics.median(latencies) * 1000, "rps": done / elapsed}


async def _database(url: str) -> str:
    name = f"b{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(url)
    await conn.execute(f"CREATE DATABASE {name}")
    await conn.close()
    return url.rsplit("/", 1)[0] + f"/{name}"


def run(seconds: float, rounds: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="ocm-replicas-"))
    results: dict[int, list[dict[str, float]]] = {1: [], 2: [], 3: []}
    with postgres_server() as pg, redis_server() as redis, \
            start_fake(80, 0.0, 0.0, Tree.at("now", ROOT)) as fake:
        for _ in range(rounds):
            for n in (1, 2, 3):
                db = asyncio.run(_database(pg))
                with replicas(n, workdir, fake.urls["llamacpp"], db, redis.url) as urls:
                    results[n].append(asyncio.run(_measure(urls, seconds)))
    return {f"{n} replica{'s' if n > 1 else ''}": {
        "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 2),
        "requests_per_s": round(statistics.median(r["rps"] for r in rs), 1)} for n, rs in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(run(args.seconds, args.rounds)))


if __name__ == "__main__":
    main()
