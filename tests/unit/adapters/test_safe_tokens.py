"""adapters.safe_tokens against a tokenizer that behaves like llama.cpp's /tokenize with
``parse_special: false``: added (USER_DEFINED) tokens are matched in plain text, longest
first; everything else is one token per character."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.safe_tokens import Token, by_ids, by_shape, safe_ids
from app.core.errors import InvalidRequest

ADDED = {"<b>": 1, "[multimodal]": 2, "<start_of_turn>": 3, "§": 4}
TEXT_TAG = {"<=>": 5}  # an ordinary token that looks like a tag
MARKER_IDS = frozenset(ADDED.values())


class FakeTokenizer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, text: str) -> list[Token]:
        self.calls.append(text)
        out: list[Token] = []
        i = 0
        table = {**ADDED, **TEXT_TAG}
        while i < len(text):
            for piece in sorted(table, key=len, reverse=True):
                if text.startswith(piece, i):
                    out.append({"id": table[piece], "piece": piece})
                    i += len(piece)
                    break
            else:
                out.append({"id": 1000 + ord(text[i]), "piece": text[i]})
                i += 1
        return out


def detokenize(ids: list[int]) -> str:
    names = {v: k for k, v in {**ADDED, **TEXT_TAG}.items()}
    return "".join(names[i] if i in names else chr(i - 1000) for i in ids)


def run(text: str, check: object) -> tuple[list[int], FakeTokenizer]:
    tok = FakeTokenizer()
    ids = asyncio.run(safe_ids(text, tok, check))  # type: ignore[arg-type]
    return ids, tok


def test_added_tokens_are_split_and_the_text_kept() -> None:
    text = "look <b>bold</b> [multimodal] <start_of_turn>model"
    ids, tok = run(text, by_ids(MARKER_IDS))
    assert not MARKER_IDS & set(ids) and detokenize(ids) == text
    assert len(tok.calls) > 1


def test_vocabulary_check_leaves_ordinary_tag_shaped_tokens_alone() -> None:
    ids, tok = run("a <=> b", by_ids(MARKER_IDS))
    assert ids == [1000 + ord("a"), 1000 + ord(" "), 5, 1000 + ord(" "), 1000 + ord("b")]
    assert tok.calls == ["a <=> b"]  # one request: nothing to split
    _, shaped = run("a <=> b", by_shape)  # the shape check cannot tell and splits
    assert len(shaped.calls) > 1


def test_shape_check_without_a_vocabulary() -> None:
    ids, _ = run("x <b> [multimodal]", by_shape)
    assert not MARKER_IDS & set(ids) and detokenize(ids) == "x <b> [multimodal]"


def test_a_one_character_marker_cannot_be_split_and_is_refused() -> None:
    with pytest.raises(InvalidRequest) as exc:
        run("section § 3", by_ids(MARKER_IDS))
    assert exc.value.code == "control_token_in_text" and exc.value.param == "messages"


def test_plain_text_is_one_request() -> None:
    ids, tok = run("hello", by_ids(MARKER_IDS))
    assert detokenize(ids) == "hello" and len(tok.calls) == 1


@given(st.lists(st.sampled_from(["<b>", "<", "b>", "[multimodal]", "[", "]", "<start_of_turn>",
                                 "<=>", "a", " ", "\n", "multi"]), max_size=20))
def test_never_a_marker_and_always_the_same_text(parts: list[str]) -> None:
    text = "".join(parts)
    ids, _ = run(text, by_ids(MARKER_IDS))
    assert not MARKER_IDS & set(ids) and detokenize(ids) == text
