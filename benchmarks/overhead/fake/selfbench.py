"""``--selfbench``: how many requests per second the fake sustains.

Starts the fake in a child process and loads it with a raw keep-alive client from this one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[3]


async def _raw_client(port: int, request: bytes, chunked: bool, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if chunked:
                await reader.readuntil(b"\r\n0\r\n\r\n")
            else:
                length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                await reader.readexactly(length)
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            counts[0] += 1
    finally:
        writer.close()


async def selfbench(seconds: float, connections: int = 32) -> None:
    """Start this server in a child process and load it from here (raw keep-alive client)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.overhead.fake", "--tokens", "32", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    urls = json.loads(await proc.stdout.readline())

    def port(name: str) -> int:
        return int(urls[name].rsplit(":", 1)[1])

    async def stats() -> dict[str, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port("control"))
        writer.write(b"GET /stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        data = await reader.read()
        writer.close()
        return dict(json.loads(data.split(b"\r\n\r\n", 1)[1]))

    prompt = list(range(1000, 1060))
    cases = [
        ("llamacpp POST /completion stream (32 tokens)", port("llamacpp"), b"/completion",
         orjson.dumps({"prompt": prompt, "stream": True, "return_tokens": True, "n_predict": -1}), True),
        ("openai POST /v1/chat/completions non-stream", port("openai"), b"/v1/chat/completions",
         orjson.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Say hello."}]}), False),
        ("openai POST /v1/chat/completions stream", port("openai"), b"/v1/chat/completions",
         orjson.dumps({"model": "tiny", "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "Say hello."}]}), True),
    ]
    try:
        for label, p, path, body, chunked in cases:
            request = (b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\n\r\n%s" % (path, len(body), body))
            before = await stats()
            counts = [0]
            t0 = time.perf_counter()
            await asyncio.gather(*(_raw_client(p, request, chunked, t0 + seconds, counts)
                                   for _ in range(connections)))
            wall = time.perf_counter() - t0
            after = await stats()
            cpu = after["cpu_s"] - before["cpu_s"]
            print(f"{label}: {counts[0] / wall:,.0f} req/s with {connections} connections "
                  f"(client-bound on a shared machine); server CPU {cpu / counts[0] * 1e6:.1f} µs/req "
                  f"-> capacity ~{counts[0] / cpu:,.0f} req/s per core")
    finally:
        proc.terminate()
        await proc.wait()
