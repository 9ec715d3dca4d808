"""The request side alone: body bytes → validated model → endpoint, through FastAPI and
:class:`~app.http.body.GatewayRoute`, for the three hot bodies; CPU µs per call, trees
interleaved.

``python -m benchmarks.bench_request_side --tree before=PATH --tree now=PATH [--rounds 3]``

Each tree runs in a subprocess of its own (``PYTHONPATH``: its ``app`` and ``schemas``): a
FastAPI app with one ``GatewayRoute`` endpoint per API (``POST /v1/chat/completions``'s,
``/v1/responses``' and ``/v1/messages``' body models, an endpoint that answers ``{}``), called
as an ASGI app with the overhead benchmark's request bodies; thread CPU time per call, the best
of 5 repeats of ``--calls`` calls.  No middleware, no engine: what the route class itself costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.overhead.trees import Tree, parse_tree, tree_env

WORKER = r'''
import asyncio, json, sys, time
import orjson
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response
from app.http.body import GatewayRoute
from schemas.chat import ChatCompletionRequest
from schemas.messages import MessagesRequest
from schemas.responses import CreateResponseBody

calls = int(sys.argv[1])
router = APIRouter(route_class=GatewayRoute)


@router.post("/chat")
async def chat(body: ChatCompletionRequest, request: Request) -> Response:
    return Response(b"{}")


@router.post("/responses")
async def responses(body: CreateResponseBody, request: Request) -> Response:
    return Response(b"{}")


@router.post("/messages")
async def messages(body: MessagesRequest, request: Request) -> Response:
    return Response(b"{}")


app = FastAPI()
app.include_router(router)
USER = [{"role": "user", "content": "Say hello."}]
BODIES = {"chat": {"model": "gpt-oss-bench", "messages": USER},
          "responses": {"model": "gpt-oss-bench", "input": USER, "store": False},
          "messages": {"model": "gpt-oss-bench", "messages": USER, "max_tokens": 1024}}


async def call(path, raw):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "method": "POST", "path": path,
             "raw_path": path.encode(), "root_path": "", "query_string": b"", "http_version": "1.1",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
             "scheme": "http", "server": ("t", 80), "client": ("c", 1), "state": {}}
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()

    statuses = []

    async def send(message):
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    if statuses != [200]:
        raise RuntimeError(f"{path}: {statuses}")


async def main():
    out = {}
    for api, body in BODIES.items():
        raw, path = orjson.dumps(body), "/" + api
        for _ in range(300):
            await call(path, raw)
        best = []
        for _ in range(5):
            t = time.thread_time()
            for _ in range(calls):
                await call(path, raw)
            best.append((time.thread_time() - t) / calls * 1e6)
        out[api] = min(best)
    print(json.dumps(out))


asyncio.run(main())
'''


def run(tree: Tree, calls: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", WORKER, str(calls)], cwd=tree.path, env=tree_env(tree),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"tree {tree.label}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_request_side",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", type=parse_tree, action="append", metavar="LABEL=PATH", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="calls per repeat (5 repeats, the best kept)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    trees: list[Tree] = args.tree
    rounds = []
    for rnd in range(args.rounds):
        order = trees[rnd % len(trees):] + trees[:rnd % len(trees)]
        results = {tree.label: run(tree, args.calls) for tree in order}
        print(f"round {rnd}: {results}", file=sys.stderr, flush=True)
        rounds.append(results)
    first = trees[0].label
    print(f"CPU µs per call (thread time, best of 5 × {args.calls}; median of {args.rounds} rounds "
          "[min, max])\n")
    ratios_head = "".join(f" | {t.label} / {first}" for t in trees[1:])
    print("| body | " + " | ".join(t.label for t in trees) + ratios_head + " |")
    print("|---" * (1 + 2 * len(trees) - 1) + "|")
    for api in rounds[0][first]:
        cells = []
        for tree in trees:
            values = [r[tree.label][api] for r in rounds]
            cells.append(f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]")
        for tree in trees[1:]:
            ratios = [r[tree.label][api] / r[first][api] for r in rounds]
            cells.append(f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
        print(f"| {api} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"trees": {t.label: str(t.path) for t in trees}, "rounds": rounds},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
