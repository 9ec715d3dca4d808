"""adapters.gguf: the GGUF metadata reader, on files written by the ``gguf`` package (the
reference writer llama.cpp's own conversion scripts use) and on hostile bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.gguf import GGUFError, Vocabulary, parse_vocabulary, read_vocabulary
from tests.support.vocab_gguf import write


def test_markers_are_the_non_text_tokens(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf")
    vocab = read_vocabulary(tmp_path / "m.gguf")
    assert vocab == Vocabulary(11, {0: "<pad>", 1: "<eos>", 4: "<b>", 7: "[multimodal]", 8: "<unused0>"})
    # A NORMAL token shaped like a tag is text (the shape check would have split it);
    # whitespace runs Gemma adds as USER_DEFINED are text; byte tokens are text.
    assert 10 not in vocab.markers and 5 not in vocab.markers and 9 not in vocab.markers


def test_no_token_types_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf", types=None)
    with pytest.raises(GGUFError, match="token types"):
        read_vocabulary(tmp_path / "m.gguf")


@pytest.mark.parametrize("data", [b"", b"GGUF", b"GGML" + b"\0" * 40, b"GGUF\x01\0\0\0" + b"\0" * 16])
def test_not_gguf(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "x").write_bytes(data)
    with pytest.raises(GGUFError):
        read_vocabulary(tmp_path / "x")


def test_missing_file_is_a_gguf_error(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="cannot read"):
        read_vocabulary(tmp_path / "absent.gguf")


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write(tmp_path_factory.mktemp("g") / "v.gguf")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_bytes_give_a_vocabulary_or_gguf_error(valid: bytes, data: st.DataObject) -> None:
    """Truncated and corrupted files: a vocabulary or GGUFError, never another exception,
    never an allocation driven by a forged length."""
    buf = bytearray(valid[:data.draw(st.integers(0, len(valid)))])
    for _ in range(data.draw(st.integers(0, 4))):
        if buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    try:
        vocab = parse_vocabulary(bytes(buf))
    except GGUFError:
        return
    assert vocab.size <= len(buf) and all(0 <= i < vocab.size for i in vocab.markers)
