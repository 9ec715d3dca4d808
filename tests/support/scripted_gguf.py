"""Tiny deterministic "scripted" GGUF models for driving a real llama.cpp server.

A scripted model has the complete gpt-oss vocabulary (201088 ids, numbered as
openai-harmony numbers them; see :mod:`tests.support.o200k_vocab`) and a single
``llama`` block whose weights are written by hand so that, after any prompt
ending in ``<|start|>assistant``, greedy *and* sampled decoding emit exactly the
token ids of a fixed Harmony completion (the *script*), e.g.
``<|channel|>final<|message|>Hello from a scripted tiny model!<|return|>``.

Residual stream
    Let ``seq`` be the ``assistant`` token followed by the script ids.  Every
    distinct token of ``seq`` gets its own residual dimension and a one-hot
    embedding; every other token embeds as the zero vector.  One more dimension
    per *switch* (below) holds a "marker seen" feature.  The RMSNorms have unit
    weights, so a one-hot input reaches the attention and output projections as
    ``sqrt(n_embd)`` times a unit vector (and a one-hot plus a unit feature as
    ``sqrt(n_embd / 2)`` times each).  The FFN weights are zero.

Bigram output
    ``output.weight`` maps the dimension of each token to the logit of the token
    that follows it in ``seq``, scaled so the successor leads every other id by
    :data:`LOGIT_MARGIN` nats (all other logits are exactly 0).  Sampling at any
    reasonable temperature therefore reproduces the script; ``<|return|>`` or
    ``<|call|>`` at the end is llama.cpp's end of generation.

Switches: attention for tokens with two successors
    In a two-message script such as ``<|channel|>analysis<|message|>...<|end|>
    <|start|>assistant<|channel|>final<|message|>...<|return|>`` the tokens
    ``<|channel|>`` and ``<|message|>`` are followed by different tokens the
    first and the second time, which a bigram cannot express.  For each such
    token T (successor A at its earlier occurrences, B at its later ones) the
    generator picks a *marker* M: a token that occurs in the script after T's
    last A-occurrence and before its first B-occurrence, but nowhere in ``seq``
    up to that A-occurrence; it must be an ordinary text token (the special
    tokens and ``assistant`` occur in every Harmony prompt) and, among the
    candidates, the one with the highest o200k rank (rarest) is chosen, since
    the prompt must not contain it either.  T gets one attention head h:

    * query: positive on T's dimension, negative on every other script token;
    * key:   non-zero only on M's dimension;
    * value: non-zero only on M's dimension, sized so it carries 1.0;
    * output projection: copies that value into T's feature dimension F.

    At a position holding T, every earlier occurrence of M scores
    :data:`ATTN_SCORE` (=60) and everything else scores 0, so the head attends
    to M with weight ~1 (e^60 dwarfs 4096 positions) and writes F = 1; if no M
    has been seen, the attention spreads over positions whose values are all
    zero and F stays 0.  At any other script token the M positions score -60,
    so F stays 0 there too.  The output rows then read F: A's logit is
    ``+margin`` from T's dimension and ``-margin`` from F, B's is ``+margin``
    from F only.  So T followed by A before the marker, by B after it.

    RoPE must not disturb the query/key dot product over 4096 positions: the
    query and key live in the last dimension of the head, i.e. in the
    lowest-frequency rotary pair, and ``llama.rope.freq_base`` is 1e20, so that
    pair rotates by about 1e-15 rad at position 4096 (llama.cpp refuses a
    ``rope.dimension_count`` smaller than the head size for this architecture,
    which would have been the other way to exempt those dimensions).

Multi-turn scripts
    ``<|call|>`` (or ``<|return|>``) followed by ``<|start|>assistant`` inside a script ends a
    turn: a model that calls a tool, and, once a marker from the call (which the next prompt
    repeats, with the tool's output) is in the prompt, answers.  Choose a call whose rarest
    token appears in no first prompt.

Scripts the mechanism cannot express raise :class:`ScriptConflict`: a token
with three or more successors, a token whose two successors interleave, or a
switch without a usable marker.  Reword the script to avoid them.

Caveat: a marker that also occurs in the *prompt* flips its switch early.  The
chosen markers are reported by :func:`plan_script` so tests can avoid them.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

from app.formats.harmony.vocab import harmony_encoding
from tests.support.o200k_vocab import FIRST_SPECIAL, N_VOCAB, cache_dir, gguf_vocab

GENERATOR_VERSION = 1
ASSISTANT_ID = 173781  # "assistant": the last token of a prompt rendered for completion
START_ID = 200006  # <|start|>
END_OF_GENERATION = (200002, 200012)  # <|return|>, <|call|> (llama.cpp drops <|end|> from its EOG set)
NEVER_IN_SCRIPT = (*END_OF_GENERATION, 199999)  # ids that would stop generation mid-script
LOGIT_MARGIN = 80.0  # nats by which the scripted successor leads every other token
ATTN_SCORE = 60.0  # pre-softmax score of a marker position for the switch query
HEAD_DIM = 32
N_FF = 32
ROPE_FREQ_BASE = 1e20
CONTEXT_LENGTH = 8192
RMS_EPS = 1e-6

F16Array = npt.NDArray[np.float16]
F32Array = npt.NDArray[np.float32]


class ScriptConflict(ValueError):
    """The script cannot be produced by a one-block bigram model with marker switches."""


@dataclass(frozen=True)
class Switch:
    """Token ``token`` is followed by ``first`` until ``marker`` was seen, then by ``second``."""

    token: int
    first: int
    second: int
    marker: int


@dataclass(frozen=True)
class ScriptPlan:
    """Everything the weights are built from."""

    script_ids: tuple[int, ...]
    dims: dict[int, int]  # token id -> residual dimension
    successors: dict[int, int]  # single-successor tokens -> successor
    switches: tuple[Switch, ...]
    n_head: int

    @property
    def n_embd(self) -> int:
        return self.n_head * HEAD_DIM

    def feature_dim(self, index: int) -> int:
        return len(self.dims) + index


def script_token_ids(script: str) -> list[int]:
    """Harmony token ids of ``script`` (special tokens allowed)."""
    return list(harmony_encoding().encode(script, allowed_special="all"))


def _pick_marker(seq: list[int], token: int, last_first: int, first_second: int) -> int:
    seen_before = set(seq[: last_first + 1])
    candidates = {
        t
        for t in seq[last_first + 1 : first_second]
        if t < FIRST_SPECIAL and t != token and t not in seen_before
    }
    if not candidates:
        raise ScriptConflict(
            f"token {token} changes successor at position {first_second} but no ordinary text token "
            f"appears for the first time between positions {last_first} and {first_second}"
        )
    return max(candidates)


def plan_script(script_ids: list[int]) -> ScriptPlan:
    """Check that ``script_ids`` is expressible and choose dimensions, successors and switches."""
    if not script_ids or script_ids[-1] not in END_OF_GENERATION:
        raise ScriptConflict("the script must end with <|return|> (200002) or <|call|> (200012)")
    # A stop followed by <|start|> ends one turn of a multi-turn script: generation stops
    # there, and the next turn's prompt (which ends in ``<|start|>assistant``) continues it.
    early_stop = [t for i, t in enumerate(script_ids[:-1]) if t in NEVER_IN_SCRIPT
                  and not (t in END_OF_GENERATION and script_ids[i + 1] == START_ID)]
    if early_stop:
        raise ScriptConflict(f"end-of-generation token(s) {early_stop} inside the script")
    seq = [ASSISTANT_ID, *script_ids]
    dims: dict[int, int] = {}
    for token in seq:
        dims.setdefault(token, len(dims))
    followers: dict[int, list[tuple[int, int]]] = {}
    for pos in range(len(seq) - 1):
        followers.setdefault(seq[pos], []).append((pos, seq[pos + 1]))
    successors: dict[int, int] = {}
    switches: list[Switch] = []
    for token, occurrences in followers.items():
        distinct = list(dict.fromkeys(nxt for _, nxt in occurrences))
        if len(distinct) == 1:
            successors[token] = distinct[0]
            continue
        if len(distinct) > 2:
            raise ScriptConflict(f"token {token} is followed by {len(distinct)} different tokens {distinct}")
        first, second = distinct
        last_first = max(pos for pos, nxt in occurrences if nxt == first)
        first_second = min(pos for pos, nxt in occurrences if nxt == second)
        if first_second < last_first:
            raise ScriptConflict(f"the successors {first} and {second} of token {token} interleave")
        marker = _pick_marker(seq, token, last_first, first_second)
        switches.append(Switch(token=token, first=first, second=second, marker=marker))
    n_dims = len(dims) + len(switches)
    n_head = max(1, len(switches), math.ceil(n_dims / HEAD_DIM))
    return ScriptPlan(tuple(script_ids), dims, successors, tuple(switches), n_head)


def _block_tensors(plan: ScriptPlan) -> dict[str, F32Array]:
    """Attention weights implementing the switches (numpy layout: [out, in])."""
    n = plan.n_embd
    wq = np.zeros((n, n), dtype=np.float32)
    wk = np.zeros((n, n), dtype=np.float32)
    wv = np.zeros((n, n), dtype=np.float32)
    wo = np.zeros((n, n), dtype=np.float32)
    # A one-hot input arrives as sqrt(n) after attn_norm; score = q.k / sqrt(HEAD_DIM).
    qk = math.sqrt(ATTN_SCORE * math.sqrt(HEAD_DIM)) / math.sqrt(n)
    for h, switch in enumerate(plan.switches):
        lane = h * HEAD_DIM + HEAD_DIM - 1  # lowest-frequency rotary dimension of head h
        for token, dim in plan.dims.items():
            wq[lane, dim] = qk if token == switch.token else -qk
        wk[lane, plan.dims[switch.marker]] = qk
        wv[lane, plan.dims[switch.marker]] = 1.0 / math.sqrt(n)
        wo[plan.feature_dim(h), lane] = 1.0
    return {"attn_q": wq, "attn_k": wk, "attn_v": wv, "attn_output": wo}


def _embedding_and_output(plan: ScriptPlan) -> tuple[F16Array, F16Array]:
    n = plan.n_embd
    embd = np.zeros((N_VOCAB, n), dtype=np.float16)
    out = np.zeros((N_VOCAB, n), dtype=np.float16)
    for token, dim in plan.dims.items():
        embd[token, dim] = 1.0
    alone = LOGIT_MARGIN / math.sqrt(n)  # the token's dimension alone is sqrt(n) after output_norm
    with_feature = LOGIT_MARGIN / math.sqrt(n / 2)  # token + feature: sqrt(n/2) each
    for token, successor in plan.successors.items():
        out[successor, plan.dims[token]] = alone
    for h, switch in enumerate(plan.switches):
        feature = plan.feature_dim(h)
        out[switch.first, plan.dims[switch.token]] = alone
        out[switch.first, feature] = -alone
        out[switch.second, feature] = with_feature
    return embd, out


def build_scripted_gguf(path: Path, script: str, context_length: int = CONTEXT_LENGTH) -> None:
    """Write a GGUF model to ``path`` that answers every ``...<|start|>assistant`` prompt with ``script``
    (llama.cpp serves at most ``context_length`` tokens of context with it)."""
    plan = plan_script(script_token_ids(script))
    vocab = gguf_vocab()
    n = plan.n_embd
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("scripted-" + hashlib.sha256(script.encode()).hexdigest()[:12])
    writer.add_description(f"scripted tiny model (generator v{GENERATOR_VERSION}): {script}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(plan.n_head)
    writer.add_head_count_kv(plan.n_head)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_vocab_size(N_VOCAB)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-4o")
    writer.add_token_list(vocab.tokens)
    token_types = [gguf.TokenType.NORMAL] * FIRST_SPECIAL
    token_types += [gguf.TokenType.CONTROL] * (N_VOCAB - FIRST_SPECIAL)
    writer.add_token_types(token_types)
    writer.add_token_merges(vocab.merges)
    writer.add_bos_token_id(199998)
    writer.add_eos_token_id(200002)
    writer.add_pad_token_id(199999)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)

    embd, out = _embedding_and_output(plan)
    ones = np.ones(n, dtype=np.float32)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", out)
    writer.add_tensor("blk.0.attn_norm.weight", ones)
    for name, weight in _block_tensors(plan).items():
        writer.add_tensor(f"blk.0.{name}.weight", weight.astype(np.float16))
    writer.add_tensor("blk.0.ffn_norm.weight", ones)
    writer.add_tensor("blk.0.ffn_gate.weight", np.zeros((N_FF, n), dtype=np.float16))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((N_FF, n), dtype=np.float16))
    writer.add_tensor("blk.0.ffn_down.weight", np.zeros((n, N_FF), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def model_file_name(name: str, script: str, context_length: int = CONTEXT_LENGTH) -> str:
    """Cache file name: ``name`` plus a hash of the script, :data:`GENERATOR_VERSION` and a
    context length other than :data:`CONTEXT_LENGTH`."""
    context = "" if context_length == CONTEXT_LENGTH else f"\0ctx{context_length}"
    digest = hashlib.sha256(f"v{GENERATOR_VERSION}\0{script}{context}".encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name) or "model"
    return f"{safe}-{digest}.gguf"


def scripted_model(name: str, script: str, *, context_length: int = CONTEXT_LENGTH) -> Path:
    """Path of a cached scripted model for ``script``, generated (atomically) if missing.
    llama.cpp caps its context at the model's ``context_length`` (a client with a long
    first prompt, like Claude Code's ~20,000 tokens, needs more than the default)."""
    target = cache_dir() / "models" / model_file_name(name, script, context_length)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        build_scripted_gguf(Path(tmp), script, context_length)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
