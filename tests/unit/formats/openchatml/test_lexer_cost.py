"""The OpenChatML lexer is linear in its input: a run of ``<`` (or of ``<|``) that never becomes a
token used to copy the rest of the buffer at every ``<`` (500 KB of them took 6 s)."""

from __future__ import annotations

import time

import pytest

from app.formats.openchatml.header import Lexer


def _lex_seconds(text: str) -> float:
    t0 = time.perf_counter()
    Lexer().feed(text)
    return time.perf_counter() - t0


@pytest.mark.parametrize("unit", ["<", "<|", "<<|", "<|x", "<|start"])
def test_a_long_run_of_almost_tokens_is_lexed_in_linear_time(unit: str) -> None:
    text = unit * (400_000 // len(unit))
    pieces = Lexer().feed(text + " <|end|>")
    assert "".join(p.text for p in pieces if p.kind == "text") == text + " "
    assert pieces[-1].kind == "end" and pieces[-1].pos == len(text) + 1
    # 4x the input: ~4x the time when linear, ~16x when quadratic (best of 3, against noise)
    small = min(_lex_seconds(text[:len(text) // 4]) for _ in range(3))
    large = min(_lex_seconds(text) for _ in range(3))
    assert large < 8 * max(small, 1e-3), f"{small:.3f} s for 1/4, {large:.3f} s for all: quadratic"


@pytest.mark.parametrize("tail", ["<", "<|", "<|en", "<|end|", "<<", "<<|end", "<|literal"])
def test_only_a_possible_token_is_held_back_at_the_end(tail: str) -> None:
    lexer = Lexer()
    pieces = lexer.feed("<" * 50 + "text" + tail)
    assert "".join(p.text for p in pieces) == "<" * 50 + "text"
    assert "".join(p.text for p in lexer.flush()) == tail
