"""Full-size load: N concurrent streaming chat completions, through the gateway and direct.

``python -m benchmarks.load --streams 1000 [--streams 5000 ...] [--json PATH]`` starts a
raw-asyncio fake llama.cpp ``/completion`` in its own process, paced so the streams overlap:
response headers at once, the first event after ``--ttft`` seconds, then a Harmony answer of
``--tokens`` tokens (plus 3 header tokens and ``<|return|>``) ``--gap`` seconds apart. Per
stream count it starts ``ocm-gateway serve`` as shipped (:mod:`benchmarks.loadgw`: its default
``--workers auto``, a SQLite file store in a temporary directory, log level ``info`` as served,
the log kept in that directory; ``limits.max_inflight`` and the upstream pool set to N so all N
run at once, or the defaults with ``--default-limits``), then with one raw asyncio HTTP/1.1
client (a connection per stream, no pool to queue in) runs two phases in turn: N streams
straight to the fake, then N through the gateway. Streams start all at once (or spread over
``--ramp`` seconds). The output says how many workers served each run.

``--variant LABEL:NAME=VALUE,...`` (repeatable) compares gateway settings in one run: each
variant starts its own gateway with the shipped defaults plus those environment variables
(``workers=N|auto`` is ``serve --workers``); ``--tree LABEL=PATH[,NAME=VALUE,...]`` the same
with the gateway of another source tree (a before/after of a change: an export of HEAD and one
with the change); ``--rounds R`` interleaves them (A, B, ..., then again); the direct phase runs
before each, so added TTFB is per round. ``--profile DIR`` records every worker with py-spy
during the burst's set-up (:mod:`benchmarks.loadprofile`, which also groups the samples).

Reported per phase: completed (the whole answer, ``[DONE]`` through the gateway), 503s, other
errors, wall time, most streams streaming at one instant, TTFB (connect → first response byte,
and → first SSE ``data:`` event) p50 / p99 / max, the CPU seconds of the gateway, the fake,
this client and the rest of the machine (another job's load shows there), and the machine's
listen-queue overflows and SYN retransmissions. For the gateway: its workers, each worker's CPU
seconds and most open descriptors (the burst's balance over the workers), its process tree's
peak RSS (``VmRSS`` sampled every 0.1 s, and ``VmHWM``), RSS before the phase, the slowest
``/health`` (probed every 0.25 s), added TTFB = gateway − direct, and in the JSON a
second-by-second timeline (CPU share, RSS, first events, finished streams). The open-files limit
is raised to its hard limit here; the fake and the gateway inherit it. Exit status 0 unless the
run itself breaks: errors are reported, not fatal. ``make load`` runs 1,000 and 5,000.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.loadfake import WARM_UP
from benchmarks.loadgw import (
    Gateway,
    Setting,
    WorkerSampler,
    parse_tree,
    parse_variant,
    start,
    stop,
    tcp_counters,
)
from benchmarks.loadprofile import Recorder
from benchmarks.loadstats import CpuMeter, RssSampler, dist_ms, markdown, open_files_limit, peak_overlap, tree
from benchmarks.overhead.trees import Tree

ROOT = Path(__file__).resolve().parents[1]
MB = 1024.0


@dataclass
class Stream:
    t0: float
    status: int = 0
    first_byte: float | None = None
    first_event: float | None = None
    end: float = 0.0
    ok: bool = False
    refused: bool = False
    error: str = ""


def _complete(tail: bytes, gateway: bool) -> bool:
    if gateway:
        return b"data: [DONE]" in tail[-64:] and b'"finish_reason":"stop"' in tail
    return tail.endswith(b"0\r\n\r\n") and b'"stop":true' in tail


async def _stream(port: int, path: bytes, body: bytes, delay: float, gateway: bool,
                  limit_s: float, on_first: Callable[[], None] | None = None) -> Stream:
    """One POST with ``connection: close``, read to EOF; times relative to the connect."""
    await asyncio.sleep(delay)
    s = Stream(time.perf_counter())
    head, tail = b"", b""
    try:
        async with asyncio.timeout(limit_s):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST %s HTTP/1.1\r\nhost: load\r\ncontent-type: application/json\r\n"
                         b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (path, len(body), body))
            while chunk := await reader.read(65536):
                now = time.perf_counter()
                if s.first_byte is None:
                    s.first_byte = now
                if s.first_event is None:
                    head += chunk
                    if b"data:" in head.partition(b"\r\n\r\n")[2]:
                        s.first_event = now
                        if on_first is not None:
                            on_first()
                tail = (tail + chunk)[-1024:]
            writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        s.error = f"{type(exc).__name__}: {exc}"[:200]
    s.end = time.perf_counter()
    s.status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0
    s.refused = s.status == 503 and b"retry-after:" in head.partition(b"\r\n\r\n")[0].lower()
    s.ok = s.status == 200 and not s.error and _complete(tail, gateway)
    if not s.ok and not s.refused and not s.error:
        s.error = f"status {s.status}: {(head or tail)[:400]!r}"
    return s


async def _phase(port: int, gateway: bool, args: argparse.Namespace, n: int,
                 on_first: Callable[[], None] | None = None) -> tuple[list[Stream], float]:
    path = b"/v1/chat/completions" if gateway else b"/completion"
    body = json.dumps({"model": "gpt-oss", "stream": True, "prompt": "hi",
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_stream(port, path, body, i * args.ramp / n, gateway, args.timeout,
                                             on_first) for i in range(n)))
    return results, time.perf_counter() - t0


def _summary(results: list[Stream], wall: float) -> dict[str, Any]:
    ok = [s for s in results if s.ok]
    errors = [s for s in results if not s.ok]
    return {
        "completed": len(ok), "errors": len(errors), "refused_503": sum(s.refused for s in results),
        "other_errors": sum(not s.ok and not s.refused for s in results),
        "first_error": next((s.error for s in errors if s.error), None),
        "wall_s": round(wall, 2),
        "peak_overlap": peak_overlap([(s.first_event, s.end) for s in ok if s.first_event]),
        "ttfb_byte_ms": dist_ms([s.first_byte - s.t0 for s in ok if s.first_byte]),
        "ttfb_event_ms": dist_ms([s.first_event - s.t0 for s in ok if s.first_event]),
        "stream_ms": dist_ms([s.end - s.t0 for s in ok]),
    }


async def _health(port: int, stop_: asyncio.Event, worst: list[float], workers: WorkerSampler) -> None:
    while not stop_.is_set():
        t0 = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")
            await reader.read()
            writer.close()
        except OSError:
            pass
        worst.append(time.perf_counter() - t0)
        workers.sample()
        await asyncio.sleep(0.25)


async def _start_gateway(n: int, up_port: int, args: argparse.Namespace, setting: Setting) -> Gateway:
    env = {"OCMGW_MODEL": "gpt-oss", "OCMGW_BACKEND_URL": f"http://127.0.0.1:{up_port}"}
    if not args.default_limits and not args.settings:
        env |= {"OCMGW__limits__max_inflight": str(n), "OCMGW__upstream__max_connections": str(n)}
    return await start(setting, env, args.log_level)


async def _measured(port: int, gateway: bool, args: argparse.Namespace, n: int,
                    roots: dict[str, list[int]], on_first: Callable[[], None] | None = None,
                    ) -> tuple[dict[str, Any], list[Stream], float]:
    """A phase with the CPU each process tree used in it and the machine's TCP counters;
    (summary, streams, start time)."""
    meter, tcp, t0 = CpuMeter(roots), tcp_counters(), time.perf_counter()
    results, wall = await _phase(port, gateway, args, n, on_first)
    after = tcp_counters()
    return _summary(results, wall) | {"cpu_s": meter.stop(), "tcp": {
        k: after[k] - tcp[k] for k in after if k in tcp}}, results, t0


class _Profile:
    """py-spy on every worker from the phase's start until all ``n`` first events (or the end)."""

    def __init__(self, gw: Gateway, n: int, prefix: Path, rate: int) -> None:
        self.recorder, self.n, self.seen = Recorder(gw.worker_pids, prefix, rate), n, 0
        self.done = asyncio.Event()

    def first(self) -> None:
        self.seen += 1
        if self.seen >= self.n:
            self.done.set()


async def run(n: int, fake: asyncio.subprocess.Process, up_port: int, args: argparse.Namespace,
              setting: Setting, tag: str) -> dict[str, Any]:
    gw = await _start_gateway(n, up_port, args, setting)
    port = gw.port
    # the client alone: the fake and the gateway are its children
    roots = {"gateway": tree(gw.proc.pid), "fake": tree(fake.pid), "client": [os.getpid()]}
    try:
        warm = json.dumps({"model": "gpt-oss", "stream": True, "seed": WARM_UP,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        # first-request imports and caches (each worker's); the fake answers these unpaced
        for _ in range(3 * gw.workers):
            await _stream(port, b"/v1/chat/completions", warm, 0, True, 30)
        direct = (await _measured(up_port, False, args, n, roots))[0]
        await asyncio.sleep(0.5)
        sampler, per_worker = RssSampler(gw.proc.pid), WorkerSampler(gw.worker_pids)
        idle_kb = sampler.sample()
        stop_, worst = asyncio.Event(), [0.0]
        watchers = [asyncio.create_task(sampler.run(stop_)),
                    asyncio.create_task(_health(port, stop_, worst, per_worker))]
        profile = _Profile(gw, n, args.profile / tag, args.profile_rate) if args.profile else None
        if profile is not None:
            await profile.recorder.start()
        measured = asyncio.create_task(_measured(port, True, args, n, roots,
                                                 profile.first if profile else None))
        if profile is not None:
            all_first = asyncio.create_task(profile.done.wait())
            await asyncio.wait([measured, all_first], return_when=asyncio.FIRST_COMPLETED)
            all_first.cancel()
            await profile.recorder.stop()
        gateway, results, t0 = await measured
        stop_.set()
        await asyncio.gather(*watchers)
        gateway |= {
            "workers": gw.workers, "worker_cpu_s": per_worker.cpu(),
            "worker_peak_fds": [per_worker.peak_fds[p] for p in gw.worker_pids],
            "rss_idle_mb": round(idle_kb / MB, 1), "rss_peak_mb": round(sampler.peak_kb / MB, 1),
            "rss_hwm_mb": round(sampler.hwm_kb() / MB, 1), "rss_samples": sampler.samples,
            "processes": len(tree(gw.proc.pid)), "open_files_limit": open_files_limit(gw.proc.pid),
            "health_worst_s": round(max(worst), 3), "load_average": os.getloadavg(),
            "imported_from": gw.imported,
            "profile": [str(f) for f in profile.recorder.files] if profile else None,
            "per_second": sampler.per_second(t0, {
                "first_events": [s.first_event for s in results if s.first_event],
                "finished": [s.end for s in results if s.ok]})}
    finally:
        await stop(gw.proc, gw.workdir)
    added = {k: None if gateway["ttfb_event_ms"][k] is None or direct["ttfb_event_ms"][k] is None
             else round(gateway["ttfb_event_ms"][k] - direct["ttfb_event_ms"][k], 1)
             for k in ("p50", "p99", "max")}
    return {"streams": n, "direct": direct, "gateway": gateway, "added_ttfb_ms": added}


def _tree_state() -> str:
    """The commit measured, and which of the gateway's files differ from it."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout
    dirty = git("status", "--porcelain", "--", "app", "adapters", "schemas").splitlines()
    return f"commit {git('rev-parse', '--short', 'HEAD').strip() or '?'}" + (
        f" + uncommitted {', '.join(line[3:] for line in dirty)}" if dirty else "")


def _raise_nofile() -> tuple[int, int]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def _main(args: argparse.Namespace) -> list[dict[str, Any]]:
    fake = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.loadfake", "--ttft", str(args.ttft),
        "--gap", str(args.gap), "--tokens", str(args.tokens), cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    shipped = Setting("", Tree.at("shipped", ROOT))
    try:
        assert fake.stdout is not None
        up_port = int(await asyncio.wait_for(fake.stdout.readline(), 30))
        runs = []
        for n in args.streams or [1000]:
            for round_ in range(args.rounds):
                for setting in args.settings or [shipped]:
                    tag = f"{n}-{setting.label or 'shipped'}-r{round_ + 1}"
                    result = await run(n, fake, up_port, args, setting, tag)
                    runs.append(({"variant": setting.label, "round": round_ + 1} if setting.label else {})
                                | result)
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        return runs
    finally:
        fake.terminate()
        await fake.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, action="append", help="repeatable; default 1000")
    parser.add_argument("--tokens", type=int, default=20, help="answer tokens per stream")
    parser.add_argument("--ttft", type=float, default=0.5, help="fake's seconds to first event")
    parser.add_argument("--gap", type=float, default=0.25, help="fake's seconds between events")
    parser.add_argument("--ramp", type=float, default=0.0, help="spread stream starts over this")
    parser.add_argument("--timeout", type=float, default=120.0, help="per stream, seconds")
    parser.add_argument("--default-limits", action="store_true",
                        help="keep the gateway's admission defaults (1,024 in flight, queue 1,024)")
    parser.add_argument("--variant", type=parse_variant, action="append", dest="settings",
                        help="LABEL:NAME=VALUE,... gateway settings to compare (repeatable; "
                             "workers=N|auto is serve --workers); the shipped defaults otherwise")
    parser.add_argument("--tree", type=parse_tree, action="append", dest="settings",
                        help="LABEL=PATH[,NAME=VALUE,...]: the gateway of another source tree "
                             "(repeatable, interleaved with the variants)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the variants")
    parser.add_argument("--log-level", default="info", help="serve --log-level (info: as shipped)")
    parser.add_argument("--profile", type=Path, help="py-spy every worker during the burst, into DIR")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args(argv)
    nofile = _raise_nofile()
    runs = asyncio.run(_main(args))
    workers = sorted({str(r["gateway"]["workers"]) for r in runs})
    setup = (f"fake upstream: headers at once, first event after {args.ttft * 1000:.0f} ms, then "
             f"{args.tokens + 4} events {args.gap * 1000:.0f} ms apart; streams started "
             + (f"over {args.ramp} s" if args.ramp else "all at once") + "; gateway limits "
             + ("per variant" if args.settings else "default" if args.default_limits
                else "max_inflight = upstream pool = streams")
             + f"; gateway workers {'/'.join(workers)} ("
             + ("per variant" if args.settings else "serve's default, --workers auto")
             + f"), log level {args.log_level}, SQLite file store"
             + f"; open files limit {nofile[0]}; {os.cpu_count()} CPUs; {_tree_state()}.")
    print(markdown(runs, setup))
    if args.json:
        args.json.write_text(json.dumps({"setup": setup, "args": {k: str(v) for k, v in vars(args).items()},
                                         "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
