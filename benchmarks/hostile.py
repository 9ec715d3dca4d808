"""Hostile requests against a real ``ocm-gateway serve``: does ``GET /health`` stay responsive?

``python -m benchmarks.hostile [--out benchmarks/results/hostile]`` starts the overhead
benchmark's fake upstream (:mod:`benchmarks.overhead.fake`) and the gateway (this checkout),
then sends each request of issue 25's reproducers, one at a time (``--rounds`` times), while a
second process asks ``/health`` every 10 ms.  For each it records the answer (status, code), how long it took,
and the slowest ``/health`` answer meanwhile.  The target: every answer well under a second,
``/health`` under 50 ms throughout.  Results: a Markdown table and JSON beside ``--out``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.overhead.processes import HARMONY_MODEL, Fake, free_port, start_fake
from benchmarks.overhead.trees import Tree
from tests.support.pdf import make_bomb

ROOT = Path(__file__).resolve().parents[1]
Json = dict[str, Any]


def _config(port: int, fake: Fake) -> str:
    return f"""\
host = "127.0.0.1"
port = {port}
[store]
path = ":memory:"
[models."{HARMONY_MODEL}"]
backend = "llamacpp"
base_urls = ["{fake.urls['llamacpp']}"]
context_window = 8192
[models."{HARMONY_MODEL}".harmony]
current_date = "2026-11-26"
"""


@contextlib.contextmanager
def _gateway(fake: Fake, workdir: Path) -> Iterator[str]:
    import subprocess

    port = free_port()
    config = workdir / "gateway.toml"
    config.write_text(_config(port, fake))
    log = (workdir / "gateway.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "serve", "--config", str(config),
                             "--log-level", "warning"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def _turns(n: int) -> list[Json]:
    out: list[Json] = []
    for i in range(n):
        out += [{"role": "user", "content": f"question {i} about the weather"},
                {"role": "assistant", "content": f"answer {i}"}]
    return [*out, {"role": "user", "content": "latest"}]


def _pdf_input(data: bytes, name: str) -> list[Json]:
    kind = "application/pdf" if name.endswith(".pdf") else "text/plain"
    return [{"role": "user", "content": [
        {"type": "input_text", "text": "Read it."},
        {"type": "input_file", "filename": name,
         "file_data": f"data:{kind};base64,{base64.b64encode(data).decode()}"}]}]


def cases() -> list[tuple[str, str, Json]]:
    word = "a" * 256_000
    compacted = [{"type": "message", "role": "user", "content": f"old {i}"} for i in range(6000)]
    return [
        ("256 KB one-word chat message", "/v1/chat/completions",
         {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": word}], "max_tokens": 8}),
        ("1.1 MB one-word /tokenize", "/tokenize", {"model": HARMONY_MODEL, "prompt": "a" * 1_100_000}),
        ("truncation auto, 2,000 turns", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _turns(2000), "truncation": "auto", "max_output_tokens": 16}),
        ("compact 6,000 items", "/v1/responses/compact", {"model": HARMONY_MODEL, "input": compacted}),
        ("PDF CPU bomb (30 pages x 200,000 operators, 7 KB)", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _pdf_input(make_bomb(30, 200_000), "bomb.pdf")}),
    ]


def _probe(url: str, stop: Any, out: Any) -> None:
    """In its own process: the benchmark's own GIL (encoding a 160 KB body) must not delay it."""
    seen: list[float] = []
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            client.get(f"{url}/health")
            seen.append(time.perf_counter() - t0)
            time.sleep(0.01)
    out.put(seen)


def measure(url: str, send: Callable[[], httpx.Response]) -> Json:
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    probe = ctx.Process(target=_probe, args=(url, stop, out))
    probe.start()
    with httpx.Client(timeout=30) as client:  # the probe is up and answering
        while True:
            with contextlib.suppress(httpx.HTTPError):
                client.get(f"{url}/health")
                break
    time.sleep(0.3)
    t0 = time.perf_counter()
    r = send()
    took = time.perf_counter() - t0
    time.sleep(0.05)
    stop.set()
    seen: list[float] = out.get(timeout=30)
    probe.join()
    code = None
    with contextlib.suppress(ValueError, KeyError, TypeError):
        code = r.json()["error"]["code"]
    return {"status": r.status_code, "code": code, "seconds": round(took, 3),
            "health_max_ms": round(max(seen) * 1000, 1), "health_probes": len(seen)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile", description=__doc__)
    parser.add_argument("--out", default="", help="write OUT.md and OUT.json")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per request (worst reported)")
    args = parser.parse_args(argv)
    rows: list[Json] = []
    with tempfile.TemporaryDirectory() as tmp, \
            start_fake(64, 0.0, 0.0, Tree("here", ROOT, "app.cli.main:main")) as fake, \
            _gateway(fake, Path(tmp)) as url, httpx.Client(timeout=300) as client:
        for name, path, body in cases():
            def send(p: str = path, b: Json = body) -> httpx.Response:
                return client.post(url + p, json=b)

            rounds = [measure(url, send) for _ in range(args.rounds)]
            row = {"case": name, **rounds[-1],
                   "seconds": max(r["seconds"] for r in rounds),
                   "health_max_ms": max(r["health_max_ms"] for r in rounds),
                   "health_median_of_max_ms": statistics.median(r["health_max_ms"] for r in rounds),
                   "rounds": len(rounds)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = ["| request | answer | slowest answer (s) | slowest /health (ms) "
             "| median round's slowest /health (ms) |",
             "|---|---|---|---|---|"]
    table += [f"| {r['case']} | {r['status']} {r['code'] or ''} | {r['seconds']} | {r['health_max_ms']} "
              f"| {r['health_median_of_max_ms']} |" for r in rows]
    print("\n".join(table))
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
        Path(args.out + ".md").write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
