"""The server's HTTP/1.1 protocols (``[http] protocol``: h11 or httptools) on what the overhead
benchmark does not send: pipelined requests and malformed heads.

``python -m benchmarks.http_protocols [--rounds 3] [--seconds 2] [--depth 16] [--connections 8]``
starts one ``ocm-gateway serve`` per protocol (no upstream is reached: ``GET /health`` and
refused heads only) and measures, in interleaved rounds, per protocol: pipelined ``GET
/health`` (``depth`` requests written at once on each of ``connections`` connections, then
read) in requests/s and server CPU µs per request; and malformed heads (a fresh connection
each, a head with a bad header line: the 400 and the close) in heads/s and CPU µs per head.
Prints a markdown table (median [min, max] over rounds); ``--json FILE`` writes every number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.overhead.processes import cpu_seconds
from tests.support.process import free_port, healthy_process

PROTOCOLS = ("h11", "httptools")
HEALTH = b"GET /health HTTP/1.1\r\nhost: bench\r\n\r\n"
MALFORMED = b"GET /health HTTP/1.1\r\nhost: bench\r\nthis is not a header\r\n\r\n"


async def _pipelined(port: int, depth: int, seconds: float) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done, end = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            writer.write(HEALTH * depth)
            for _ in range(depth):
                await reader.readuntil(b'{"status":"ok"}')
            done += depth
    finally:
        writer.close()
    return done


async def _malformed(port: int, seconds: float) -> int:
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(MALFORMED)
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 400"), answer[:100]
        writer.close()
        done += 1
    return done


def _measure(pid: int, port: int, kind: str, args: argparse.Namespace) -> dict[str, float]:
    async def run() -> int:
        if kind == "pipelined":
            jobs = [_pipelined(port, args.depth, args.seconds) for _ in range(args.connections)]
        else:
            jobs = [_malformed(port, args.seconds) for _ in range(args.connections)]
        return sum(await asyncio.gather(*jobs))

    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    n = asyncio.run(run())
    cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - t0
    return {"per_s": n / wall, "cpu_us": cpu / n * 1e6, "n": n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http_protocols",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--depth", type=int, default=16, help="pipelined requests per write")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    results: dict[str, dict[str, list[dict[str, float]]]] = {p: {"pipelined": [], "malformed": []}
                                                             for p in PROTOCOLS}
    with ExitStack() as stack:
        servers: dict[str, tuple[int, int]] = {}
        for protocol in PROTOCOLS:
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("OCMGW")}
            env.update({"OCMGW_MODEL": "bench", "OCMGW_BACKEND_URL": "http://127.0.0.1:9",
                        "OCMGW__store__path": ":memory:", "OCMGW__http__protocol": protocol})
            cmd = [str(Path(sys.executable).with_name("ocm-gateway")), "serve", "--port", str(port),
                   "--log-level", "error"]
            running = stack.enter_context(healthy_process(cmd, f"http://127.0.0.1:{port}", env=env))
            servers[protocol] = (running.process.pid, port)
        for rnd in range(args.rounds):
            order = PROTOCOLS if rnd % 2 == 0 else PROTOCOLS[::-1]
            for kind in ("pipelined", "malformed"):
                for protocol in order:
                    pid, port = servers[protocol]
                    numbers = _measure(pid, port, kind, args)
                    results[protocol][kind].append(numbers)
                    print(f"round {rnd} {kind:9} {protocol:9} {numbers['per_s']:8.0f}/s "
                          f"{numbers['cpu_us']:6.0f} µs CPU each", file=sys.stderr)

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):,.0f} [{min(values):,.0f}, {max(values):,.0f}]"

    print(f"| protocol | pipelined /health ({args.depth} a write, {args.connections} connections): "
          "req/s | CPU µs/req | malformed head (400 + close): heads/s | CPU µs/head |")
    print("|---|---|---|---|---|")
    for protocol in PROTOCOLS:
        p, m = results[protocol]["pipelined"], results[protocol]["malformed"]
        print(f"| {protocol} | {cell([r['per_s'] for r in p])} | {cell([r['cpu_us'] for r in p])} | "
              f"{cell([r['per_s'] for r in m])} | {cell([r['cpu_us'] for r in m])} |")
    if args.json:
        meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "loadavg": os.getloadavg(),
                                "args": vars(args) | {"json": str(args.json)}}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
