"""Per-token cost of the gateway's streaming hot path (no network).

Measures, for a long Harmony answer (analysis + final), the time per token of
llama.cpp event JSON → Chunk → Harmony parser → policies-free chat encoder → SSE
bytes.  Run: ``python -m benchmarks.bench_stream_path`` (results: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import time

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


if __name__ == "__main__":
    main()
