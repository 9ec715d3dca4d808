"""The request side alone: body bytes → validated model → endpoint, through FastAPI and
:class:`~app.http.body.GatewayRoute`, for the three hot bodies; CPU µs per call, trees
interleaved.

``python -m benchmarks.bench_request_side --tree before=PATH --tree now=PATH [--rounds 3]``

Each tree runs in a subprocess of its own (``PYTHONPATH``: its ``app`` and ``schemas``): a
FastAPI app with one ``GatewayRoute`` endpoint per API (``POST /v1/chat/completions``'s,
``/v1/responses``' and ``/v1/messages``' body models, an endpoint that answers ``{}``), called
as an ASGI app (:func:`benchmarks.inprocess.asgi_post`) with the overhead benchmark's request
bodies; thread CPU time per call, the best of 5 repeats of ``--calls`` calls.  No middleware, no
engine: what the route class itself costs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.inprocess import ratio_table, run_worker, write_rounds
from benchmarks.overhead.runner import rotated
from benchmarks.overhead.trees import Tree, parse_tree

# ``python -c WORKER ROOT CALLS``: one tree's route class, CPU µs per call for each body
WORKER = r'''
import asyncio, json, sys, time
import orjson
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response
from app.http.body import GatewayRoute
from schemas.chat import ChatCompletionRequest
from schemas.messages import MessagesRequest
from schemas.responses import CreateResponseBody
sys.path.insert(0, sys.argv[1])
from benchmarks.inprocess import asgi_post
del sys.path[0]

calls = int(sys.argv[2])
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
    status, _ = await asgi_post(app, path, raw)
    if status != 200:
        raise RuntimeError(f"{path}: {status}")


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
    result: dict[str, float] = run_worker(tree, WORKER, str(calls))
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
        results = {tree.label: run(tree, args.calls) for tree in rotated(trees, rnd)}
        print(f"round {rnd}: {results}", file=sys.stderr, flush=True)
        rounds.append(results)
    print(f"CPU µs per call (thread time, best of 5 × {args.calls}; median of {args.rounds} rounds "
          "[min, max])\n")
    print("\n".join(ratio_table("body", [t.label for t in trees], rounds, float, 1)))
    if args.json:
        write_rounds(args.json, trees, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
