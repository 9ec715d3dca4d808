"""Chunking (app/knowledge/chunking.py): OpenAI's strategies validated as OpenAI validates them
(400 naming the parameter), ``auto`` capped for the embedder, and the windows themselves checked
against the o200k token ids they must hold."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.core.errors import InvalidRequest
from app.formats.harmony.text import encode_text
from app.formats.harmony.vocab import harmony_encoding
from app.knowledge.chunking import auto, chunk, strategy
from app.knowledge.vectors import Chunking


def static(size: Any, overlap: Any) -> dict[str, Any]:
    return {"type": "static", "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap}}


def test_auto_is_openai_800_400_capped_for_the_embedder() -> None:
    assert strategy(None) == strategy({"type": "auto"}) == Chunking(800, 400, "auto")
    assert strategy(None, 256) == auto(256) == Chunking(256, 128, "auto")
    assert strategy({"type": "auto"}, 4096) == Chunking(800, 400, "auto")
    assert strategy(static(100, 50), 512) == Chunking(100, 50, "static")
    assert strategy(static(4096, 0)) == Chunking(4096, 0, "static")


@pytest.mark.parametrize(("given", "param"), [
    (static(99, 0), "chunking_strategy.static.max_chunk_size_tokens"),
    (static(4097, 0), "chunking_strategy.static.max_chunk_size_tokens"),
    (static(200, 101), "chunking_strategy.static.chunk_overlap_tokens"),
    (static(200, -1), "chunking_strategy.static.chunk_overlap_tokens"),
    (static("200", 10), "chunking_strategy.static.max_chunk_size_tokens"),
    (static(200, True), "chunking_strategy.static.chunk_overlap_tokens"),
    (static(200.0, 10), "chunking_strategy.static.max_chunk_size_tokens"),
    ({"type": "static"}, "chunking_strategy.static"),
    ({"type": "static", "static": {"max_chunk_size_tokens": 200}},
     "chunking_strategy.static.chunk_overlap_tokens"),
    ({"type": "semantic"}, "chunking_strategy.type"),
    ({"type": "auto", "static": {}}, "chunking_strategy.static"),
    ("auto", "chunking_strategy"),
])
def test_bad_strategies_name_their_parameter(given: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as bad:
        strategy(given)
    assert bad.value.param == param and bad.value.status == 400


def test_a_static_window_the_embedder_cannot_read_is_refused() -> None:
    with pytest.raises(InvalidRequest) as bad:
        strategy(static(1000, 100), 512, param="files[2].chunking_strategy")
    assert bad.value.param == "files[2].chunking_strategy.static.max_chunk_size_tokens"
    assert "512" in bad.value.message


def test_windows_hold_the_tokens_they_should() -> None:
    enc = harmony_encoding()
    text = " ".join(f"word{i} alpha beta, gamma." for i in range(700))
    ids = encode_text(enc, text)
    size, overlap = 120, 40
    step = size - overlap
    found = chunk(text, Chunking(size, overlap, "static"))
    expected = [enc.decode(ids[s:s + size]).strip() for s in range(0, len(ids) - overlap, step)]
    assert found == expected
    assert len(found) == math.ceil((len(ids) - size) / step) + 1
    assert found[-1].endswith("word699 alpha beta, gamma.")
    short = text[:3000]
    assert len(encode_text(enc, short)) < 4096 and chunk(short, Chunking(4096, 0, "static")) == [short]


def test_no_character_is_split_and_special_tokens_stay_text() -> None:
    text = "Ünïcødé 日本語のテキスト 🙂🙂 <|endoftext|> <|start|>assistant " * 300
    pieces = chunk(text, Chunking(100, 50, "static"))
    assert len(pieces) > 10
    assert all("\ufffd" not in p for p in pieces)
    assert all(p in text for p in pieces)  # each window is a stretch of the text, whole characters
    assert "<|endoftext|>" in pieces[0]
    assert chunk("", auto()) == [] and chunk("   \n ", auto()) == []
