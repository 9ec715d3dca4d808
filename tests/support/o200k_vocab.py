"""The gpt-oss (o200k + Harmony specials) vocabulary in the form llama.cpp loads.

llama.cpp's ``gpt2`` tokenizer model is a byte-level BPE in the Hugging Face style:

* every token is stored as a *string* in which each byte is replaced by the
  printable character GPT-2's ``bytes_to_unicode`` table assigns to it, and
* encoding applies an explicit, ordered list of *merges* (``"left right"``).

tiktoken (and therefore openai-harmony) instead stores raw token bytes with a
rank and, inside each pre-tokenized piece, repeatedly merges the adjacent pair
whose concatenation has the lowest rank.  The two are equivalent when the merge
list is ordered by the rank of the merged token and each token's merge is the
pair that tiktoken's own BPE would combine last when building that token: run
BPE on the token's bytes allowing only strictly lower ranks; what is left is
exactly two pieces, and those are the merge.

When only one split of a token into two lower-ranked tokens exists, that split
must be the merge, so the (slow, pure Python) BPE simulation only runs for the
tokens with several candidate splits.  The result is cached on disk next to the
scripted models, keyed by the vocabulary file's hash.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.formats.harmony.vocab import ensure_vocab_file, harmony_encoding

N_VOCAB = 201088
FIRST_SPECIAL = 199998
MERGES_FORMAT_VERSION = 1

# Special tokens whose names the scripts and llama.cpp's end-of-generation logic rely on.
KNOWN_SPECIALS: dict[int, str] = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
}


def cache_dir() -> Path:
    """``$OCM_GATEWAY_CACHE`` or ``~/.cache/ocm-gateway``: where generated files are kept."""
    override = os.environ.get("OCM_GATEWAY_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "ocm-gateway"


@functools.cache
def byte_to_unicode() -> tuple[str, ...]:
    """GPT-2's reversible byte -> printable character table (index = byte value).

    Printable Latin-1 bytes map to themselves; the remaining 68 bytes (controls,
    space, ...) map, in byte order, to the code points 256, 257, ...
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


def to_gguf_text(token: bytes) -> str:
    """Render raw token bytes in llama.cpp's byte-level BPE string form."""
    table = byte_to_unicode()
    return "".join(table[b] for b in token)


@functools.cache
def o200k_ranks() -> tuple[bytes, ...]:
    """The o200k tokens indexed by rank (0 .. 199997), read from the tiktoken file."""
    by_rank: dict[int, bytes] = {}
    for line in ensure_vocab_file().read_text(encoding="ascii").splitlines():
        if not line:
            continue
        b64, rank = line.split()
        by_rank[int(rank)] = base64.b64decode(b64)
    if sorted(by_rank) != list(range(FIRST_SPECIAL)):
        raise RuntimeError("o200k_base.tiktoken does not hold ranks 0..199997 exactly once")
    return tuple(by_rank[r] for r in range(FIRST_SPECIAL))


def _bpe_last_merge(token: bytes, rank: int, rank_of: dict[bytes, int]) -> tuple[bytes, bytes]:
    """tiktoken's BPE on ``token`` restricted to ranks below ``rank``; returns the two pieces left."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank = rank
        best_at = -1
        for i in range(len(parts) - 1):
            r = rank_of.get(parts[i] + parts[i + 1], rank)
            if r < best_rank:
                best_rank, best_at = r, i
        if best_at < 0:
            break
        parts[best_at : best_at + 2] = [parts[best_at] + parts[best_at + 1]]
    if len(parts) != 2:
        raise RuntimeError(f"token of rank {rank} ({token!r}) does not reduce to one merge")
    return parts[0], parts[1]


def compute_merges(tokens: Sequence[bytes]) -> list[str]:
    """Merges (``"left right"`` in GPT-2 string form) ordered by the merged token's rank."""
    rank_of = {tok: r for r, tok in enumerate(tokens)}
    merges: list[str] = []
    for rank, token in enumerate(tokens):
        if len(token) < 2:
            continue
        candidates = [
            (token[:k], token[k:])
            for k in range(1, len(token))
            if rank_of.get(token[:k], rank) < rank and rank_of.get(token[k:], rank) < rank
        ]
        if len(candidates) == 1:
            left, right = candidates[0]
        else:
            left, right = _bpe_last_merge(token, rank, rank_of)
        merges.append(f"{to_gguf_text(left)} {to_gguf_text(right)}")
    return merges


def _vocab_digest() -> str:
    digest = hashlib.sha256(ensure_vocab_file().read_bytes())
    digest.update(f"merges-v{MERGES_FORMAT_VERSION}".encode())
    return digest.hexdigest()[:16]


def o200k_merges() -> list[str]:
    """The BPE merges for o200k, computed once and cached as JSON in the cache directory."""
    target = cache_dir() / "models" / f"o200k-merges-{_vocab_digest()}.json"
    if target.is_file():
        cached: list[str] = json.loads(target.read_text(encoding="utf-8"))
        return cached
    merges = compute_merges(o200k_ranks())
    atomic_write_bytes(target, json.dumps(merges, ensure_ascii=False).encode("utf-8"))
    return merges


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` via a temporary file in the same directory and ``os.replace``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@dataclass(frozen=True)
class GgufVocab:
    """Token strings, types and merges for the ``tokenizer.ggml.*`` GGUF keys."""

    tokens: list[str]
    specials: dict[int, str]
    merges: list[str]


def special_token_names() -> dict[int, str]:
    """Names of ids 199998..201087 as openai-harmony decodes them (checked against KNOWN_SPECIALS)."""
    encoding = harmony_encoding()
    names = {i: encoding.decode([i]) for i in range(FIRST_SPECIAL, N_VOCAB)}
    for token_id, expected in KNOWN_SPECIALS.items():
        if names[token_id] != expected:
            raise RuntimeError(f"harmony names id {token_id} {names[token_id]!r}, expected {expected!r}")
    for token_id, name in names.items():
        if not (name.startswith("<|") and name.endswith("|>")):
            raise RuntimeError(f"unexpected special token name {name!r} for id {token_id}")
    return names


@functools.cache
def gguf_vocab() -> GgufVocab:
    """The full 201088-entry vocabulary in llama.cpp's form (cached per process)."""
    specials = special_token_names()
    tokens = [to_gguf_text(tok) for tok in o200k_ranks()]
    tokens.extend(specials[i] for i in range(FIRST_SPECIAL, N_VOCAB))
    if len(set(tokens)) != N_VOCAB:
        raise RuntimeError("vocabulary strings are not unique")
    return GgufVocab(tokens=tokens, specials=specials, merges=o200k_merges())
