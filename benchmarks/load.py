"""Full-size load: N concurrent streaming chat completions against the real gateway process.

``python -m benchmarks.load --streams 1000 [--streams 5000 ...]`` starts a raw-asyncio fake
llama.cpp upstream (a paced Harmony answer: ``--tokens`` tokens, ``--gap`` seconds apart)
and ``ocm-gateway serve`` with default limits, then opens all streams at once with a raw
asyncio HTTP/1.1 client (no client-side pool to queue in), while probing ``/health`` every
0.25 s. It reports, per run: streams that ended with ``[DONE]`` after the answer, 503s (with
``Retry-After``), other failures, stream latency p50 / p99, the slowest ``/health`` answer,
and how long the 503s took. ``make load`` runs 1,000 and 5,000. Results: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = [200005, 17196, 200008]  # <|channel|>final<|message|>
WORD = 13225  # "Hello"
RETURN = 200002


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tokens: int,
                    gap: float) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        if head.startswith(b"GET"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        ids = [*HEADER, *[WORD] * tokens, RETURN]
        for n, tok in enumerate(ids):
            event = b'data: {"content":"x","tokens":[%d],"stop":false}\n\n' % tok
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            if gap and n < len(ids) - 1:
                await asyncio.sleep(gap)
        end = (b'data: {"content":"","tokens":[],"stop":true,"stop_type":"eos",'
               b'"tokens_evaluated":50,"tokens_predicted":%d,"timings":{}}\n\n' % len(ids))
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _request(port: int, body: bytes) -> tuple[int, bytes, float]:
    """One POST with ``connection: close``; (status, whole body, seconds)."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    data = await reader.read()
    writer.close()
    status = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data, time.perf_counter() - t0


async def _health(port: int, stop: asyncio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")
            await reader.read()
            writer.close()
        except OSError:
            pass
        worst.append(time.perf_counter() - t0)
        await asyncio.sleep(0.25)


async def run(streams: int, tokens: int, gap: float) -> dict[str, object]:
    server = await asyncio.start_server(lambda r, w: _upstream(r, w, tokens, gap), "127.0.0.1", 0,
                                        backlog=8192)
    up_port = server.sockets[0].getsockname()[1]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMGW")}
    env.update({"OCMGW_MODEL": "gpt-oss", "OCMGW_BACKEND_URL": f"http://127.0.0.1:{up_port}",
                "OCMGW__store__path": ":memory:"})
    exe = Path(sys.executable).with_name("ocm-gateway")
    gw = await asyncio.create_subprocess_exec(
        str(exe), "serve", "--port", str(port), "--log-level", "error", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                await asyncio.wait_for(_request(port, b"{}"), 1)
                break
            except OSError:
                await asyncio.sleep(0.1)
        body = json.dumps({"model": "gpt-oss", "stream": True,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        stop, worst = asyncio.Event(), [0.0]
        probe = asyncio.create_task(_health(port, stop, worst))
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_request(port, body) for _ in range(streams)),
                                       return_exceptions=True)
        wall = time.perf_counter() - t0
        stop.set()
        await probe
    finally:
        gw.terminate()
        await asyncio.wait_for(gw.wait(), 30)
        server.close()
    done = [r for r in results if not isinstance(r, BaseException) and r[0] == 200
            and b"data: [DONE]" in r[1][-64:] and b'"finish_reason":"stop"' in r[1]]
    refused = [r for r in results if not isinstance(r, BaseException) and r[0] == 503
               and b"retry-after:" in r[1].lower()]
    latencies = sorted(r[2] for r in done)
    return {
        "streams": streams, "ok": len(done), "503": len(refused),
        "other": streams - len(done) - len(refused), "wall_s": round(wall, 1),
        "p50_s": round(statistics.median(latencies), 2) if latencies else None,
        "p99_s": round(latencies[int(len(latencies) * 0.99) - 1], 2) if latencies else None,
        "503_max_s": round(max((r[2] for r in refused), default=0), 2),
        "health_worst_s": round(max(worst), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, action="append")
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("--gap", type=float, default=0.005)
    args = parser.parse_args()
    for n in args.streams or [1000]:
        print(json.dumps(asyncio.run(run(n, args.tokens, args.gap))), flush=True)


if __name__ == "__main__":
    main()
