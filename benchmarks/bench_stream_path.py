"""Per-token cost of the gateway's streaming hot path (no network).

Measures, for a long Harmony answer (analysis + final), the time per token of
llama.cpp event JSON → Chunk → Harmony parser → policies-free chat encoder → SSE
bytes.  Run: ``python -m benchmarks.bench_stream_path`` (results: benchmarks/RESULTS.md).

``--pipeline --tree LABEL=PATH ...``: the whole pipeline above the socket, each tree's code in a
process of its own, trees interleaved in rounds: a llama.cpp backend (httpx ``MockTransport``)
→ ``post_batches`` → failover → ``EventStream`` → ``Run`` (non-stream: the fold; stream: the
chat encoder's payloads through ``Frames.batched``), CPU time per answer for two shapes of the
upstream body: ``paced`` (one event per read, the loop given back between reads, as a model
producing tokens one at a time) and ``burst`` (the whole answer in one read); a round's value is the
best of ``--repeats`` (noise on a shared machine only adds).
``--profile SHAPE-MODE`` prints that case's cProfile (this checkout) instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import orjson

from adapters.llamacpp import event_to_chunk
from app.api.chat.encode import ChatEncoder
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import harmony_encoding
from app.http.sse import data_event


def main() -> None:
    enc = harmony_encoding()
    words = " ".join(f"word{i % 50}" for i in range(2000))
    script = (f"<|channel|>analysis<|message|>{words}<|end|><|start|>assistant<|channel|>final"
              f"<|message|>{words}<|return|>")
    ids = enc.encode(script, allowed_special="all")
    raw = [orjson.dumps({"index": 0, "content": enc.decode([t]), "tokens": [t], "stop": False})
           for t in ids]
    raw.append(orjson.dumps({"content": "", "tokens": [], "stop": True, "stop_type": "eos",
                             "tokens_predicted": len(ids), "tokens_evaluated": 100}))
    best = float("inf")
    for _ in range(5):
        parser = HarmonyEventParser(100)
        encoder = ChatEncoder("chatcmpl-x", "m", 0, include_usage=True, logprobs=False)
        out = 0
        t0 = time.perf_counter()
        for data in raw:
            for event in parser.feed(event_to_chunk(orjson.loads(data))):
                for payload in encoder.encode(event):
                    out += len(data_event(payload))
        best = min(best, time.perf_counter() - t0)
    print(f"tokens={len(ids)} best_total_ms={best * 1e3:.1f} us_per_token={best / len(ids) * 1e6:.2f} "
          f"sse_bytes={out}")
    # the stages apart: upstream JSON → Chunk, the parser, the encoder + SSE framing
    chunks = [event_to_chunk(orjson.loads(data)) for data in raw]
    stages: dict[str, float] = {}
    for _ in range(5):
        t0 = time.perf_counter()
        for data in raw:
            event_to_chunk(orjson.loads(data))
        t1 = time.perf_counter()
        parser = HarmonyEventParser(100)
        events = [e for chunk in chunks for e in parser.feed(chunk)]
        t2 = time.perf_counter()
        encoder = ChatEncoder("chatcmpl-x", "m", 0, include_usage=True, logprobs=False)
        for event in events:
            for payload in encoder.encode(event):
                data_event(payload)
        t3 = time.perf_counter()
        for name, took in (("upstream JSON -> Chunk", t1 - t0), ("Harmony parser", t2 - t1),
                           ("chat encoder + SSE", t3 - t2)):
            stages[name] = min(stages.get(name, float("inf")), took)
    for name, took in stages.items():
        print(f"  {name}: us_per_token={took / len(ids) * 1e6:.2f}")


# ``python -c PIPELINE ROOT ARGS_JSON`` inside a tree: its CPU µs per answer for every case
PIPELINE = r'''
import asyncio, json, sys, time
args = json.loads(sys.argv[2])
import httpx, orjson
from adapters.llamacpp import LlamaCppBackend
from app.api.chat.encode import ChatEncoder
from app.core.access import ANONYMOUS
from app.core.conversation import GenerationParams
from app.core.prompt import Prompt
from app.engine.run import Run
from app.engine.stream import EventStream
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CHANNEL, MESSAGE, RETURN, harmony_encoding

enc = harmony_encoding()


def pieces(tokens):
    words = enc.encode(" ".join(f"word{i % 50}" for i in range(tokens)))[:tokens]
    ids = [CHANNEL, *enc.encode("final"), MESSAGE, *words, RETURN]
    out = [b"data: " + orjson.dumps({"index": 0, "content": enc.decode([t]), "tokens": [t],
                                     "stop": False}) + b"\n\n" for t in ids]
    out.append(b"data: " + orjson.dumps({"content": "", "tokens": [], "stop": True, "stop_type": "eos",
                                        "tokens_predicted": len(ids), "tokens_evaluated": 100}) + b"\n\n")
    return out


class Body(httpx.AsyncByteStream):
    def __init__(self, parts, paced):
        self.parts, self.paced = parts, paced

    async def __aiter__(self):
        for part in self.parts:
            if self.paced:
                await asyncio.sleep(0)  # a wake-up per read, as a paced upstream brings
            yield part


def backend(shape):
    parts = pieces(args["paced_tokens"] if shape == "paced" else args["burst_tokens"])
    paced = shape == "paced"
    if not paced:
        parts = [b"".join(parts)]

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body(parts, paced))

    return LlamaCppBackend(httpx.AsyncClient(transport=httpx.MockTransport(handler)), ["http://up"])


async def answer(back, mode):
    params = GenerationParams()
    chunks = back.stream(Prompt(token_ids=(1, 2, 3)), params)
    first = await chunks.__anext__()
    stream = EventStream(first, chunks, HarmonyEventParser(100), params, frozenset(), "m", 0.0)
    encoder = ChatEncoder("chatcmpl-x", "m", 0, include_usage=True, logprobs=False,
                          stream=mode == "stream")
    run = Run("r", "m", ANONYMOUS, encoder, mode, None, {})
    run.begin(stream)
    if mode == "wait":
        body = await run.result()
        assert body["choices"][0]["message"]["content"].startswith("word0"), body
    else:
        n = 0
        async for batch in run.frames().batched():
            n += len(batch)
        assert n > 3


async def case(shape, mode, n, repeats):
    back = backend(shape)
    for _ in range(20):
        await answer(back, mode)
    best = []
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(n):
            await answer(back, mode)
        best.append((time.process_time() - t0) / n * 1e6)
    return min(best)  # the least disturbed repeat (a shared machine's noise only adds)


async def main():
    out = {}
    for shape in ("paced", "burst"):
        for mode in ("wait", "stream"):
            out[f"{shape}-{mode}"] = await case(shape, mode, args["answers"], args["repeats"])
    print(json.dumps(out))


if args.get("profile"):
    import cProfile, pstats
    shape, mode = args["profile"].split("-")
    prof = cProfile.Profile()
    asyncio.run(case(shape, mode, 5, 1))
    prof.enable()
    asyncio.run(case(shape, mode, args["answers"], 1))
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    print(json.dumps({}))
else:
    asyncio.run(main())
'''


def pipeline(argv: list[str]) -> int:
    from pathlib import Path

    from benchmarks.inprocess import ratio_table, run_worker
    from benchmarks.overhead.runner import rotated
    from benchmarks.overhead.trees import Tree, parse_tree

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_stream_path --pipeline")
    parser.add_argument("--pipeline", action="store_true")
    parser.add_argument("--tree", type=parse_tree, action="append", metavar="LABEL=PATH")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--answers", type=int, default=30, help="answers per case and repeat")
    parser.add_argument("--repeats", type=int, default=7, help="the best of these is the round's")
    parser.add_argument("--paced-tokens", type=int, default=200)
    parser.add_argument("--burst-tokens", type=int, default=80)
    parser.add_argument("--profile", metavar="SHAPE-MODE", help="e.g. paced-wait: cProfile of this checkout")
    args = parser.parse_args(argv)
    worker_args: dict[str, Any] = {"answers": args.answers, "repeats": args.repeats,
                                   "paced_tokens": args.paced_tokens, "burst_tokens": args.burst_tokens,
                                   "profile": args.profile}
    if args.profile:
        import subprocess
        subprocess.run([sys.executable, "-c", PIPELINE, ".", json.dumps(worker_args)], check=True)
        return 0
    trees: list[Tree] = args.tree or [Tree.at("this", Path("."))]
    rounds: list[dict[str, dict[str, float]]] = []
    for rnd in range(args.rounds):
        results = {}
        for tree in rotated(trees, rnd):
            results[tree.label] = run_worker(tree, PIPELINE, json.dumps(worker_args))
            print(f"round {rnd} {tree.label}: " + ", ".join(f"{k} {v:.0f}" for k, v in
                                                            results[tree.label].items()),
                  file=sys.stderr, flush=True)
        rounds.append(results)
    print(f"CPU µs per answer (paced: {args.paced_tokens} tokens, one event per read; burst: "
          f"{args.burst_tokens} tokens in one read; wait: non-stream, stream: chat chunks), median "
          f"of {args.rounds} rounds [min, max]; ratio: the same round's\n")
    print("\n".join(ratio_table("case", [t.label for t in trees], rounds, float, 0, lower=True)))
    return 0


if __name__ == "__main__":
    if "--pipeline" in sys.argv[1:] or "--profile" in sys.argv[1:]:
        sys.exit(pipeline(sys.argv[1:]))
    main()
