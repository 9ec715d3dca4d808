"""Client text to token ids in bounded time (app/formats/harmony/text.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidRequest
from app.formats.harmony.text import MAX_RUN, RUN, check_runs, encode_text
from app.formats.harmony.vocab import harmony_encoding

ENC = harmony_encoding()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab c\n!é<|>"), max_size=600))
def test_the_same_ids_as_one_call_when_no_run_is_long(text: str) -> None:
    pieces = encode_text(ENC, text)
    whole = list(ENC.encode(text, allowed_special=set(), disallowed_special=()))
    if all(len(word) <= RUN for word in text.split()):
        assert pieces == whole
    assert ENC.decode(pieces) == text  # always the same text, token for character


def test_a_megabyte_word_is_encoded_not_a_panic() -> None:
    text = "x" + "a" * 1_100_000 + " tail"
    ids = encode_text(ENC, text)
    assert ENC.decode(ids) == text
    with pytest.raises(BaseException):  # noqa: B017 - what the gateway no longer hands it
        ENC.encode("a" * 1_100_000, allowed_special=set())


def test_special_token_text_stays_characters() -> None:
    ids = encode_text(ENC, "<|start|>" + "b" * 1000)
    assert 200006 not in ids


def test_runs_openai_harmony_would_encode_are_bounded() -> None:
    check_runs("a" * MAX_RUN + " ok", "instructions")
    with pytest.raises(InvalidRequest) as info:
        check_runs("x " + "a" * (MAX_RUN + 1), "instructions")
    assert info.value.param == "instructions" and info.value.status == 400
