"""The BERT → GGUF converter (:mod:`app.knowledge.bert_gguf`) on a tiny made-up model: what it
writes is read back with gguf's own reader (names, types, vocabulary, special tokens, pooling,
the weights themselves); bad sources are refused; the cache converts once, atomically.  The
real model served by the real llama.cpp is tests/integration/test_embedding_model.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

from app.knowledge import bert_gguf

VOCAB = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", ","]
HIDDEN, FFN, LAYERS, POSITIONS = 8, 16, 2, 32


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def t(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": t(len(VOCAB), HIDDEN),
         "embeddings.position_embeddings.weight": t(POSITIONS, HIDDEN),
         "embeddings.token_type_embeddings.weight": t(2, HIDDEN),
         "embeddings.LayerNorm.weight": t(HIDDEN), "embeddings.LayerNorm.bias": t(HIDDEN),
         "embeddings.position_ids": np.arange(POSITIONS, dtype=np.int64)[None],
         "pooler.dense.weight": t(HIDDEN, HIDDEN), "pooler.dense.bias": t(HIDDEN)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        for name, shape in (("attention.self.query", (HIDDEN, HIDDEN)),
                            ("attention.self.key", (HIDDEN, HIDDEN)),
                            ("attention.self.value", (HIDDEN, HIDDEN)),
                            ("attention.output.dense", (HIDDEN, HIDDEN)),
                            ("intermediate.dense", (FFN, HIDDEN)), ("output.dense", (HIDDEN, FFN))):
            w[f"{p}.{name}.weight"], w[f"{p}.{name}.bias"] = t(*shape), t(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}.{norm}.weight"], w[f"{p}.{norm}.bias"] = t(HIDDEN), t(HIDDEN)
    return w


def make_model(folder: Path, *, pooling: dict[str, Any] | None = None, vocab: list[str] = VOCAB,
               model_type: str = "bert") -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    weights = _weights(np.random.default_rng(7))
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": model_type, "hidden_size": HIDDEN, "intermediate_size": FFN,
        "num_hidden_layers": LAYERS, "num_attention_heads": 2, "max_position_embeddings": POSITIONS,
        "layer_norm_eps": 1e-12, "type_vocab_size": 2, "vocab_size": len(vocab)}))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    if pooling is not None:
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return weights


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    return reader.fields[key].contents()


def test_the_gguf_holds_what_llama_cpp_reads_for_bert(tmp_path: Path) -> None:
    weights = make_model(tmp_path / "src", pooling={"pooling_mode_mean_tokens": True})
    out = bert_gguf.convert(tmp_path / "src", tmp_path / "model.gguf")
    reader = gguf.GGUFReader(out)
    assert _field(reader, "general.architecture") == "bert"
    assert _field(reader, "bert.block_count") == LAYERS
    assert _field(reader, "bert.context_length") == POSITIONS
    assert _field(reader, "bert.embedding_length") == HIDDEN
    assert _field(reader, "bert.attention.causal") is False
    assert _field(reader, "bert.pooling_type") == gguf.PoolingType.MEAN
    assert _field(reader, "tokenizer.ggml.model") == "bert"
    assert _field(reader, "tokenizer.ggml.tokens") == [
        "[PAD]", "\u2581[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581the", "\u2581cat", "s",
        "\u2581,"]
    control = [VOCAB[i] for i, t in enumerate(_field(reader, "tokenizer.ggml.token_type"))
               if t == gguf.TokenType.CONTROL]
    assert control == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 3  # [CLS] opens every input
    assert _field(reader, "tokenizer.ggml.seperator_token_id") == 4
    assert _field(reader, "tokenizer.ggml.unknown_token_id") == 2
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.ggml.add_sep_token") is True
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 5 + LAYERS * 16  # position ids and the pooler are left out
    assert tensors["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.1.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    for f32 in ("position_embd.weight", "token_types.weight", "blk.0.attn_q.bias",
                "blk.0.layer_output_norm.weight"):
        assert tensors[f32].tensor_type == gguf.GGMLQuantizationType.F32, f32
    ffn = np.asarray(tensors["blk.1.ffn_up.weight"].data, dtype=np.float32).reshape(FFN, HIDDEN)
    np.testing.assert_allclose(ffn, weights["encoder.layer.1.intermediate.dense.weight"], rtol=1e-3)
    norm = np.asarray(tensors["blk.0.attn_output_norm.bias"].data)
    np.testing.assert_array_equal(norm, weights["encoder.layer.0.attention.output.LayerNorm.bias"])


def test_cls_pooling_and_refusals(tmp_path: Path) -> None:
    make_model(tmp_path / "cls", pooling={"pooling_mode_cls_token": True})
    reader = gguf.GGUFReader(bert_gguf.convert(tmp_path / "cls", tmp_path / "cls.gguf"))
    assert _field(reader, "bert.pooling_type") == gguf.PoolingType.CLS
    make_model(tmp_path / "max", pooling={"pooling_mode_max_tokens": True})
    with pytest.raises(bert_gguf.ConversionError, match="only mean or CLS"):
        bert_gguf.convert(tmp_path / "max", tmp_path / "max.gguf")
    make_model(tmp_path / "roberta", model_type="roberta")
    with pytest.raises(bert_gguf.ConversionError, match="not 'bert'"):
        bert_gguf.convert(tmp_path / "roberta", tmp_path / "r.gguf")
    make_model(tmp_path / "nocls", vocab=[t for t in VOCAB if t != "[CLS]"])
    with pytest.raises(bert_gguf.ConversionError, match=r"lacks \[CLS\]"):
        bert_gguf.convert(tmp_path / "nocls", tmp_path / "n.gguf")
    with pytest.raises(bert_gguf.ConversionError, match="no model"):
        bert_gguf.cached(tmp_path / "absent", "x", tmp_path / "cache")


def test_the_cache_converts_once_and_again_for_new_weights(tmp_path: Path) -> None:
    make_model(tmp_path / "src")
    cache = tmp_path / "cache"
    first = bert_gguf.cached(tmp_path / "src", "tiny", cache)
    stamp = first.stat().st_mtime_ns
    assert bert_gguf.cached(tmp_path / "src", "tiny", cache) == first
    assert first.stat().st_mtime_ns == stamp and oct(first.stat().st_mode)[-3:] == "644"
    os.utime(tmp_path / "src" / "model.safetensors", ns=(1, 1))  # the package was reinstalled
    second = bert_gguf.cached(tmp_path / "src", "tiny", cache)
    assert second != first and sorted(p.name for p in cache.iterdir()) == sorted([first.name, second.name])


def test_a_failed_conversion_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    make_model(tmp_path / "src", model_type="roberta")
    with pytest.raises(bert_gguf.ConversionError):
        bert_gguf.cached(tmp_path / "src", "tiny", tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
