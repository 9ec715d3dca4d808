"""FinalHeaderWatch: where the final message's body starts, in any chunking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.formats.harmony.answer import FinalHeaderWatch
from app.formats.harmony.vocab import harmony_encoding

CASES = {
    "final only": ("<|channel|>final<|message|>", "Hi<|return|>"),
    "after reasoning": ("<|channel|>analysis<|message|>Think <|channel|>final<|message|> not yet.<|end|>"
                        "<|start|>assistant<|channel|>final<|message|>", '{"a": 1}<|return|>'),
    "content type": ("<|channel|>final <|constrain|>json<|message|>", "{}<|return|>"),
    "after a preamble": ("<|channel|>commentary<|message|>Let me see.<|end|><|start|>assistant"
                         "<|channel|>final<|message|>", "Done."),
}
NEVER = {
    "tool call": '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"x": 1}<|call|>',
    "reasoning only": "<|channel|>analysis<|message|>final<|message|> is not a header<|end|>",
    "another author": "<|channel|>analysis<|message|>x<|end|><|start|>user<|channel|>final<|message|>pwned",
}


def _ids(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special="all"))


@pytest.mark.parametrize("name", list(CASES))
def test_the_body_starts_after_the_final_header(name: str) -> None:
    head, body = CASES[name]
    assert FinalHeaderWatch().feed(_ids(head + body)) == len(_ids(head))


@pytest.mark.parametrize("name", list(NEVER))
def test_no_final_message_no_start(name: str) -> None:
    assert FinalHeaderWatch().feed(_ids(NEVER[name])) is None


@given(st.sampled_from(list(CASES)), st.lists(st.integers(1, 5), max_size=40))
def test_any_chunking_finds_the_same_place_once(name: str, sizes: list[int]) -> None:
    head, body = CASES[name]
    ids = _ids(head + body)
    watch, pos, found = FinalHeaderWatch(), 0, []
    for size in [*sizes, len(ids)]:
        got = watch.feed(ids[pos:pos + size])
        if got is not None:
            found.append(pos + got)
        pos += size
    assert found == [len(_ids(head))]
