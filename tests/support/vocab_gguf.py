"""Small GGUF files that hold only a vocabulary (token texts and types), written with the
``gguf`` package, the writer llama.cpp's own conversion scripts use."""

from __future__ import annotations

from pathlib import Path

import gguf

TOKENS = ["<pad>", "<eos>", "hello", "▁world", "<b>", "\n\n", "   ", "[multimodal]", "<unused0>",
          "<0x0A>", "<think>"]
TYPES = [gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.NORMAL, gguf.TokenType.NORMAL,
         gguf.TokenType.USER_DEFINED, gguf.TokenType.USER_DEFINED, gguf.TokenType.USER_DEFINED,
         gguf.TokenType.USER_DEFINED, gguf.TokenType.UNUSED, gguf.TokenType.BYTE,
         gguf.TokenType.NORMAL]


def write(path: Path, tokens: list[str] = TOKENS, types: list[int] | None = TYPES) -> bytes:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("test.nested.before", 7)
    w.add_array("test.floats", [0.5, 1.5])
    w.add_string("general.name", "vocab test")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    w.add_array("test.strings.after", ["a", "bc"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()
