"""An independent reference for a sentence-transformers BERT model: its uncased WordPiece
tokenizer and its forward pass (float64 numpy, from the safetensors weights), mean-pooled and
L2-normalised as sentence-transformers' all-MiniLM-L6-v2 pipeline does.  Shares no code with
the converter (:mod:`app.knowledge.bert_gguf`) nor with llama.cpp, so the GGUF served by
llama.cpp can be checked against it."""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                             (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


class WordPiece:
    """BERT's uncased tokenizer (basic tokenization, then greedy longest-match WordPiece)."""

    def __init__(self, vocab_txt: Path) -> None:
        self.vocab = {t: i for i, t in enumerate(vocab_txt.read_text(encoding="utf-8").splitlines())}

    def _words(self, text: str) -> list[str]:
        cleaned = []
        for ch in text:
            if ord(ch) in (0, 0xFFFD) or (unicodedata.category(ch).startswith("C")
                                          and ch not in "\t\n\r"):
                continue
            cleaned.append(f" {ch} " if _is_cjk(ord(ch)) else " " if ch.isspace() else ch)
        words = []
        for word in "".join(cleaned).split():
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                           if unicodedata.category(c) != "Mn")
            current = ""
            for ch in word:
                if _is_punctuation(ch):
                    words += [current, ch] if current else [ch]
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def ids(self, text: str) -> list[int]:
        """Token ids with ``[CLS]`` ... ``[SEP]``."""
        out = [self.vocab["[CLS]"]]
        for word in self._words(text):
            pieces, start = [], 0
            while start < len(word):
                end = len(word)
                while end > start:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    if piece in self.vocab:
                        break
                    end -= 1
                if end == start:
                    pieces = [self.vocab["[UNK]"]]
                    break
                pieces.append(self.vocab[piece])
                start = end
            out += pieces if len(word) <= 100 else [self.vocab["[UNK]"]]
        return [*out, self.vocab["[SEP]"]]


_erf = np.vectorize(math.erf)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    normed: np.ndarray = (x - mean) / np.sqrt(var + eps) * w + b
    return normed


class BertReference:
    """The model's sentence embedding, computed directly from its weights."""

    def __init__(self, model_dir: Path) -> None:
        self.config = json.loads((model_dir / "config.json").read_text())
        self.w = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()
                  if k != "embeddings.position_ids"}
        self.tokenizer = WordPiece(model_dir / "vocab.txt")

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def embed(self, text: str) -> np.ndarray:
        ids = self.tokenizer.ids(text)
        w, eps = self.w, float(self.config["layer_norm_eps"])
        heads = int(self.config["num_attention_heads"])
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][: len(ids)]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        n, d = x.shape
        size = d // heads
        for i in range(int(self.config["num_hidden_layers"])):
            p = f"encoder.layer.{i}"
            q, k, v = (self._linear(x, f"{p}.attention.self.{m}").reshape(n, heads, size).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            attended = self._linear(context.transpose(1, 0, 2).reshape(n, d), f"{p}.attention.output.dense")
            x = _layer_norm(x + attended, w[f"{p}.attention.output.LayerNorm.weight"],
                            w[f"{p}.attention.output.LayerNorm.bias"], eps)
            h = self._linear(x, f"{p}.intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))  # exact GELU
            x = _layer_norm(x + self._linear(h, f"{p}.output.dense"), w[f"{p}.output.LayerNorm.weight"],
                            w[f"{p}.output.LayerNorm.bias"], eps)
        pooled: np.ndarray = x.mean(0)
        return pooled / float(np.linalg.norm(pooled))
