"""A tiny Gemma 3 multimodal projector (``mmproj.gguf``) with seeded random weights.

llama.cpp's ``--mmproj`` loads it next to any Gemma 3 text model: a one-block SigLIP-style
vision tower (64 x 64 pixels, 8 x 8 patches) and the Gemma 3 projector (average pool by
:data:`SCALE`, RMS norm, projection to the text model's embedding width).  The model sees
noise, not pictures; what it proves is the plumbing: an image sent through the gateway
is decoded, encoded and evaluated by the real server, :data:`IMAGE_TOKENS` tokens of it.
(globalmm would fit a real projector, but it needs SigLIP's weights from a model hub.)
"""

from __future__ import annotations

import mmap
from pathlib import Path

import gguf
import numpy as np

from adapters.gguf import _Reader

IMAGE_SIZE, PATCH, SCALE = 64, 8, 2
IMAGE_TOKENS = (IMAGE_SIZE // PATCH // SCALE) ** 2  # 16
WIDTH, HEADS, FFN = 32, 2, 64


def text_width(model: Path) -> int:
    """The embedding width of a Gemma 3 text GGUF (what the projector must produce), from
    its metadata only (``gguf.GGUFReader`` would parse every tensor: 26 s for 270M)."""
    with open(model, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        r = _Reader(buf)
        r.pos = 8  # magic, version
        r.take("Q")  # tensor count
        for _ in range(r.count(12)):
            key = r.string()
            value = r.value(r.take("I"))
            if key == "gemma3.embedding_length":
                return int(value)
    raise ValueError(f"{model} has no gemma3.embedding_length")


def write_mmproj(path: Path, n_embd_text: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", "gemma3")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    writer.add_uint32("clip.vision.patch_size", PATCH)
    writer.add_uint32("clip.vision.embedding_length", WIDTH)
    writer.add_uint32("clip.vision.feed_forward_length", FFN)
    writer.add_uint32("clip.vision.projection_dim", n_embd_text)
    writer.add_uint32("clip.vision.block_count", 1)
    writer.add_uint32("clip.vision.attention.head_count", HEADS)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.projector.scale_factor", SCALE)
    n_patches = (IMAGE_SIZE // PATCH) ** 2
    tensors = {
        "v.patch_embd.weight": w(WIDTH, 3, PATCH, PATCH),
        "v.patch_embd.bias": w(WIDTH),
        "v.position_embd.weight": w(n_patches, WIDTH),
        "v.post_ln.weight": np.ones(WIDTH, np.float32),
        "v.post_ln.bias": np.zeros(WIDTH, np.float32),
        "mm.input_projection.weight": w(WIDTH, n_embd_text),
        "mm.soft_emb_norm.weight": np.ones(WIDTH, np.float32),
    }
    for name, shape in (("attn_q", (WIDTH, WIDTH)), ("attn_k", (WIDTH, WIDTH)),
                        ("attn_v", (WIDTH, WIDTH)), ("attn_out", (WIDTH, WIDTH)),
                        ("ffn_up", (FFN, WIDTH)), ("ffn_down", (WIDTH, FFN))):
        tensors[f"v.blk.0.{name}.weight"] = w(*shape)
        tensors[f"v.blk.0.{name}.bias"] = w(shape[0])
    for norm in ("ln1", "ln2"):
        tensors[f"v.blk.0.{norm}.weight"] = np.ones(WIDTH, np.float32)
        tensors[f"v.blk.0.{norm}.bias"] = np.zeros(WIDTH, np.float32)
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
