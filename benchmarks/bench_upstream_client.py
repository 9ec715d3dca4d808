"""The upstream client alone: CPU per streamed generation through httpx over the aiohttp
transport (the path before issue 40's thin client) against the thin client on the same pool.

``python -m benchmarks.bench_upstream_client [--tokens 80] [--rounds 5] [--requests 300]``

One process runs both clients in interleaved rounds (so machine load hits both alike) against
the fake llama.cpp of ``benchmarks.overhead.fake`` in a subprocess; each request is what a
backend sends (``adapters.transport.post_stream``: a JSON POST, SSE decoded into events, the
body drained after the final ``stop`` event so the connection is reused).  CPU is this
process's (``time.process_time``), so the fake's own work is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import aclosing

import httpx

from adapters.aiohttp_transport import AiohttpTransport
from adapters.transport import post_stream
from adapters.upstream import PooledClient

BODY = {"prompt": [200006, 17360, 200008, 13225], "n_predict": 200, "stream": True,
        "return_tokens": True, "cache_prompt": True}


async def one(client: httpx.AsyncClient, url: str) -> int:
    count = 0
    async with aclosing(post_stream(client, url, BODY, "llama.cpp",  # type: ignore[type-var]
                                    is_last=lambda e: bool(e.get("stop")))) as events:
        async for _ in events:
            count += 1
    return count


async def cpu_per_request(client: httpx.AsyncClient, url: str, requests: int, concurrency: int,
                          ) -> float:
    """µs of this process's CPU per request, ``requests`` in all over ``concurrency`` workers."""
    per_worker = requests // concurrency

    async def worker() -> None:
        for _ in range(per_worker):
            await one(client, url)

    start = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - start) * 1e6 / (per_worker * concurrency)


async def run(args: argparse.Namespace, url: str) -> dict[str, dict[int, list[float]]]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    timeout = httpx.Timeout(connect=10.0, read=60.0, write=10.0, pool=10.0)
    clients: dict[str, Callable[[], httpx.AsyncClient]] = {
        "httpx over aiohttp": lambda: httpx.AsyncClient(transport=AiohttpTransport(limits),
                                                        timeout=timeout, limits=limits),
        "thin client": lambda: PooledClient(limits, timeout),
    }
    results: dict[str, dict[int, list[float]]] = {name: {} for name in clients}
    opened = {name: make() for name, make in clients.items()}
    try:
        for client in opened.values():  # warm-up: connections open, code paths hot
            await cpu_per_request(client, url, 64, 32)
        for r in range(args.rounds):
            for concurrency in (1, 32):
                order = list(opened.items()) if r % 2 == 0 else list(reversed(opened.items()))
                for name, client in order:
                    us = await cpu_per_request(client, url, args.requests, concurrency)
                    results[name].setdefault(concurrency, []).append(us)
                    print(f"round {r} c={concurrency:<2} {name:<20} {us:8.0f} µs/req",
                          file=sys.stderr)
    finally:
        await asyncio.gather(*(c.aclose() for c in opened.values()))
    return results


def table(results: dict[str, dict[int, list[float]]]) -> str:
    names = list(results)
    lines = ["| client | CPU µs/req c=1 (median [min, max]) | CPU µs/req c=32 |", "|---|---|---|"]
    for name in names:
        cells = [f"{statistics.median(v):,.0f} [{min(v):,.0f}, {max(v):,.0f}]"
                 for v in (results[name][1], results[name][32])]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    base, new = results[names[0]], results[names[1]]
    ratios = [statistics.median(n / b for n, b in zip(new[c], base[c], strict=True)) for c in (1, 32)]
    lines.append(f"| {names[1]} / {names[0]} (median of per-round ratios) | "
                 f"{ratios[0]:.3f} | {ratios[1]:.3f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_upstream_client")
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--json")
    args = parser.parse_args()
    fake = subprocess.Popen([sys.executable, "-m", "benchmarks.overhead.fake", "--tokens",
                             str(args.tokens), "--keepalive-max", "1000000"], stdout=subprocess.PIPE)
    try:
        assert fake.stdout is not None
        url = json.loads(fake.stdout.readline())["llamacpp"] + "/completion"
        numbers = asyncio.run(run(args, url))
    finally:
        fake.terminate()
        fake.wait(10)
    print(table(numbers))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(numbers, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
