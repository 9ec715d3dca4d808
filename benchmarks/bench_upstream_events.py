"""CPU of the upstream side of one 80-token llama.cpp answer, no network: the SSE body as the
fake (and llama-server) sends it, cut into events (``SSEDecoder``), each event parsed
(``json_event``) and turned into a ``Chunk`` (the llama.cpp reader), trees interleaved.

``python -m benchmarks.bench_upstream_events --tree before=PATH --tree now=PATH [--rounds 6]
[--tokens 80] [--repeat 3000]``

Each tree runs in a subprocess of its own (:func:`benchmarks.inprocess.run_worker`), timed with
``time.process_time``; the table gives µs per answer (median [min, max] over rounds) per stage
and in all, and each later tree's ratio to the first in the same round.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.inprocess import ratio_table, run_worker
from benchmarks.overhead.runner import rotated
from benchmarks.overhead.trees import parse_tree

WORKER = r'''
import json, sys, time
import orjson
from adapters.sse import SSEDecoder
from adapters.transport import json_event
from adapters.llamacpp import LlamaCppReader
tokens, repeat = int(sys.argv[2]), int(sys.argv[3])

def sse(obj):
    return b"data: " + orjson.dumps(obj) + b"\n\n"

body = b"".join(sse({"index": 0, "content": "tok%d " % i, "tokens": [1000 + i], "stop": False,
                     "id_slot": -1, "tokens_predicted": i + 1, "tokens_evaluated": 120})
                for i in range(tokens))
body += sse({"index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True,
             "tokens_predicted": tokens, "tokens_evaluated": 120, "stop_type": "eos",
             "stopping_word": "", "timings": {"cache_n": 119}})
reader = LlamaCppReader()

def best(step):
    times = []
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(repeat):
            step()
        times.append((time.process_time() - t0) / repeat * 1e6)
    return min(times)

events = SSEDecoder().decode(body)
objects = [json_event(e, "x") for e in events]
out = {"sse decode": best(lambda: SSEDecoder().decode(body)),
       "json_event": best(lambda: [json_event(e, "x") for e in events]),
       "event -> Chunk": best(lambda: [reader.chunk(o) for o in objects]),
       "all three": best(lambda: [reader.chunk(json_event(e, "x")) for e in SSEDecoder().decode(body)])}
print(json.dumps(out))
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_upstream_events")
    parser.add_argument("--tree", type=parse_tree, action="append", metavar="LABEL=PATH", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("--repeat", type=int, default=3000)
    args = parser.parse_args(argv)
    trees = args.tree
    rounds = []
    for r in range(args.rounds):
        got = {}
        for tree in rotated(trees, r):
            got[tree.label] = run_worker(tree, WORKER, str(args.tokens), str(args.repeat))
            print(f"round {r} {tree.label}: {got[tree.label]}", file=sys.stderr, flush=True)
        rounds.append(got)
    labels = [t.label for t in trees]
    print(f"{args.tokens}-token llama.cpp answer, µs of CPU per answer, {args.rounds} rounds\n")
    print("\n".join(ratio_table("stage", labels, rounds, float, 1, lower=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
