"""Client text to token ids in bounded time (app/formats/harmony/text.py)."""

from __future__ import annotations

import base64
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.conversation import FunctionTool
from app.core.errors import InvalidRequest
from app.formats.harmony.text import (
    CHUNK,
    MAX_RUN,
    MAX_TOKEN_CHARS,
    MAX_TOOL_TEXT,
    RUN,
    check_runs,
    check_tool_text,
    encode_text,
    min_tokens_of,
    spans,
)
from app.formats.harmony.vocab import harmony_encoding
from tests.support.o200k_vocab import o200k_ranks

ENC = harmony_encoding()
# every character class o200k's pre-tokenizer tells apart: cases, digits, whitespace of several
# kinds, the apostrophe of contractions, the '/' and newline a punctuation piece may end in,
# CJK, a combining mark, a titlecase and a modifier letter, non-decimal numbers, an emoji
ALPHABET = "aZbY09 \n\r\t\u00a0'/|_<>!.,-中，。\u0301½²ǅʰéÉ😀\u2028\u3000"
HOSTILE = {"spaces": " ", "no-break spaces": "\u00a0", "newlines": "\n", "tabs": "\t",
           "slash-newline": "/\n", "ideographic spaces": "\u3000", "letters": "a", "CJK": "中",
           "punctuation": "!", "marks": "\u0301", "mixed whitespace": " \u00a0\t\n"}


def _one(text: str, allowed: Any = frozenset()) -> list[int]:
    return list(ENC.encode(text, allowed_special=allowed, disallowed_special=()))


class Recorder:
    """The encoding, recording the text of each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def encode(self, text: str, **kw: Any) -> list[int]:
        self.calls.append(text)
        return list(ENC.encode(text, **kw))


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=st.sampled_from(ALPHABET), max_size=120), st.integers(2, 40))
def test_cut_only_at_safe_points_the_ids_are_one_calls(text: str, chunk: int) -> None:
    """Calls of at most ``chunk`` characters (cut as often as the text allows) give exactly the
    ids of one call, wherever no cut was forced."""
    parts = list(spans(text, chunk=chunk))
    assert "".join(text[a:b] for a, b, _ in parts) == text
    ids = [i for a, b, _ in parts for i in _one(text[a:b])]
    if not any(forced for *_, forced in parts):
        assert ids == _one(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "Z", "0", " ", "\n", "_", "|", "<|start|>", "<|end|>",
                                 "<|reserved_200013|>", "中", "!"]), max_size=60).map("".join),
       st.integers(2, 30))
def test_special_tokens_are_never_cut_when_allowed(text: str, chunk: int) -> None:
    parts = list(spans(text, specials=True, chunk=chunk))
    ids = [i for a, b, _ in parts for i in _one(text[a:b], "all")]
    if not any(forced for *_, forced in parts):
        assert ids == _one(text, "all")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(ALPHABET), max_size=2000))
def test_always_the_same_text_and_the_same_ids_without_a_long_run(text: str) -> None:
    ids = encode_text(ENC, text)
    assert ENC.decode(ids) == text
    assert len(ids) >= min_tokens_of(len(text))
    if not re.search(rf"[\S\r\n]{{{RUN + 1}}}|\s{{{RUN + 1}}}", text):
        assert ids == _one(text)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_no_call_meets_a_long_piece(name: str) -> None:
    """A long run of any class (whitespace included: the last fix split only non-whitespace)
    reaches the encoder in calls of at most RUN characters, and comes back intact."""
    text = "x " + HOSTILE[name] * (70_000 // len(HOSTILE[name])) + " tail"
    rec = Recorder()
    ids = encode_text(rec, text)  # type: ignore[arg-type]
    assert ENC.decode(ids) == text
    assert max(len(call) for call in rec.calls) <= RUN + 2


@pytest.mark.parametrize("text", [" " * 1_100_000, "\u00a0" * 600_000, "/\n" * 550_000])
def test_a_megabyte_of_whitespace_is_encoded_not_a_panic(text: str) -> None:
    ids = encode_text(ENC, text)
    assert ENC.decode(ids) == text


def test_a_megabyte_word_is_encoded_not_a_panic() -> None:
    text = "x" + "a" * 1_100_000 + " tail"
    ids = encode_text(ENC, text)
    assert ENC.decode(ids) == text
    with pytest.raises(BaseException):  # noqa: B017 - what the gateway no longer hands it
        ENC.encode("a" * 1_100_000, allowed_special=set())


def _natural() -> dict[str, str]:
    rng = random.Random(7)
    readme = (Path(__file__).resolve().parents[4] / "README.md").read_text()
    return {"prose": readme * 3, "words": "w " * 100_000,
            "csv": ",".join(str(i) for i in range(60_000)),
            "url": "https://example.com/" + "/".join(f"seg{i}" for i in range(5000)),
            "base64": base64.b64encode(rng.randbytes(150_000)).decode(),
            "CJK": ("中文文本，" * 20 + "。") * 500, "code": "    if x:\n        y = 1\n" * 10_000}


@pytest.mark.parametrize("name", list(_natural()))
def test_ordinary_text_is_encoded_exactly_in_short_calls(name: str) -> None:
    """Long ordinary text (a non-whitespace run of a CSV line, a URL, base64 included) is cut
    at safe points only: the ids of one call, in calls of at most CHUNK characters."""
    text = _natural()[name]
    rec = Recorder()
    assert encode_text(rec, text) == _one(text)  # type: ignore[arg-type]
    assert len(rec.calls) > 1 and max(len(call) for call in rec.calls) <= CHUNK


def test_special_token_text_stays_characters() -> None:
    ids = encode_text(ENC, "<|start|>" + "b" * 1000)
    assert 200006 not in ids
    assert 200006 in encode_text(ENC, "x " * 20_000 + "<|start|>" + "y " * 20_000, "all")


def test_the_token_floor_holds_for_the_longest_tokens() -> None:
    for text in (" " * 10_000, "-" * 10_000, "=" * 10_000, "\n" * 10_000, "a" * 10_000):
        assert len(encode_text(ENC, text)) >= min_tokens_of(len(text))
    assert max(len(token) for token in o200k_ranks()) == MAX_TOKEN_CHARS  # bytes


@pytest.mark.parametrize("unit", [" ", "\u00a0", "\n", "/\n", "a", "中"])
def test_runs_openai_harmony_would_encode_are_bounded(unit: str) -> None:
    check_runs("a" * MAX_RUN + " ok", "instructions")
    check_runs("word " * 5000 + ",".join(["12"] * 5000), "instructions")  # ordinary, long
    with pytest.raises(InvalidRequest) as info:
        check_runs("x " + unit * (MAX_RUN + 1), "instructions")
    assert info.value.param == "instructions" and info.value.status == 400


def _tool(description: str = "", parameters: dict[str, Any] | None = None) -> FunctionTool:
    return FunctionTool(name="f", description=description, parameters=parameters)


def test_tool_text_openai_harmony_encodes_in_one_call_is_bounded() -> None:
    """A tool's text is encoded by openai-harmony in one call holding the GIL: a 14 MB
    parameter description held ``/health`` up to 15 s; more than MAX_TOOL_TEXT characters of
    descriptions and schema strings in all is a 400 naming ``tools``."""
    words = "word " * (MAX_TOOL_TEXT // 5)  # just under the bound, ordinary text
    check_tool_text((_tool(words[: MAX_TOOL_TEXT - 40], {"type": "object"}),))
    hostile = [
        (_tool(parameters={"type": "object", "properties": {
            "a": {"type": "string", "description": words * 2}}}),),
        (_tool(parameters={"type": "object", "properties": {
            "a": {"type": "string", "enum": ["w " * 50] * (MAX_TOOL_TEXT // 50)}}}),),
        (_tool(words), _tool(words)),  # each within the bound, not both
    ]
    for tools in hostile:
        with pytest.raises(InvalidRequest) as info:
            check_tool_text(tools)
        assert info.value.param == "tools" and info.value.status == 400
        assert info.value.code == "invalid_value"


def test_the_agents_tool_sets_are_far_below_the_bound() -> None:
    """Claude Code's first request (tests/fixtures/claude_code) carries ~45,000 characters of
    tool text: the bound leaves it ~6x room."""
    body = json.loads((Path(__file__).parents[3] / "fixtures/claude_code/first_request.json").read_text())
    body = body.get("body", body)
    tools = tuple(FunctionTool(name=t["name"], description=t.get("description", ""),
                               parameters=t.get("input_schema")) for t in body["tools"])
    check_tool_text(tools)
    size = sum(len(t.description or "") + len(json.dumps(t.parameters)) for t in tools)
    assert size * 5 < MAX_TOOL_TEXT
