"""Reasoning is never the answer (issue 35, item 6): of everything a gpt-oss model may write,
only the bodies of ``final`` messages become answer text, and only commentary without a
recipient becomes a preamble; a message without a channel, addressed ``to=assistant`` or on a
channel Harmony does not define is reasoning.  Checked on generated token sequences cut into
any chunks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.chat.fold import Folded
from app.core.output import Chunk, Finish
from app.formats.harmony.header import HarmonyFormatError
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CALL, END, RETURN, START, harmony_encoding

_ENC = harmony_encoding()
CHANNELS = [None, "analysis", "commentary", "final", "weird", "Final", "final_answer"]
RECIPIENTS = [None, "assistant", "functions.get_weather", "user"]
TYPES = [None, "<|constrain|>json", "json"]


@dataclass(frozen=True)
class _Message:
    role: bool  # the header names the author (always after the first message)
    channel: str | None
    recipient: str | None
    content_type: str | None
    recipient_first: bool  # ``assistant to=X<|channel|>...`` rather than ``<|channel|>... to=X``
    terminator: int

    @property
    def header(self) -> str:
        to = f" to={self.recipient}" if self.recipient else ""
        channel = f"<|channel|>{self.channel}" if self.channel is not None else ""
        ctype = f" {self.content_type}" if self.content_type else ""
        author = "assistant" if self.role else ""
        return author + (to + channel if self.recipient_first else channel + to) + ctype

    @property
    def kind(self) -> str:
        """What its body must be shown as (the module docstring of parse.py)."""
        if self.recipient == "functions.get_weather":
            return "tool"
        if self.recipient == "user" or (self.content_type == "json" and not self.recipient):
            return "error"  # a recipient the gateway does not provide ("json" reads as one)
        if self.recipient is None and self.channel == "final":
            return "text"
        if self.recipient is None and self.channel == "commentary":
            return "preamble"
        return "reasoning"


_MESSAGE = st.builds(_Message, st.booleans(), st.sampled_from(CHANNELS), st.sampled_from(RECIPIENTS),
                     st.sampled_from(TYPES), st.booleans(), st.sampled_from([END, END, END, RETURN, CALL]))


def _ids(messages: list[_Message]) -> list[int]:
    ids: list[int] = []
    for i, m in enumerate(messages):
        if i:
            ids.append(START)
        body = f"{m.kind.upper()}{i}." if m.kind != "tool" else '{"city": "Paris"}'
        ids += [*_ENC.encode(f"{m.header}<|message|>{body}", allowed_special="all"), m.terminator]
    return ids


@settings(max_examples=800, deadline=None)
@given(st.lists(_MESSAGE, min_size=1, max_size=5), st.lists(st.integers(0, 300), max_size=8))
def test_only_final_messages_are_the_answer(messages: list[_Message], cuts: list[int]) -> None:
    for i, m in enumerate(messages):  # later messages name their author (a role is required)
        if i and not m.role:
            messages[i] = _Message(True, m.channel, m.recipient, m.content_type, m.recipient_first,
                                   m.terminator)
    ids = _ids(messages)
    parser = HarmonyEventParser(prompt_tokens=5)
    folded = Folded()
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    for a, b in itertools.pairwise(bounds):
        for e in parser.feed(Chunk(token_ids=tuple(ids[a:b]))):
            folded.add(e)
    for e in [*parser.feed(Chunk(finish=Finish("eos"))), *parser.close()]:
        folded.add(e)
    # what is read: the messages up to the first that stops the answer
    read: list[tuple[int, _Message]] = []
    for i, m in enumerate(messages):
        read.append((i, m))
        if m.terminator != END or m.kind == "error":
            break
    expected = {kind: "".join(f"{kind.upper()}{i}." for i, m in read if m.kind == kind)
                for kind in ("text", "preamble", "reasoning")}
    last = read[-1][1]
    if last.kind == "error":
        assert folded.error is not None and folded.error.code == "unsupported_recipient"
    elif last.terminator == END:  # no stop token at all
        assert folded.error is not None and folded.error.code == "stream_truncated"
    else:
        assert folded.error is None, folded.error
    assert folded.text == expected["text"]
    assert folded.preamble == expected["preamble"]
    assert folded.reasoning == expected["reasoning"]
    assert "REASONING" not in folded.content and "ERROR" not in folded.content


def _fold(script: str) -> Folded:
    parser = HarmonyEventParser(prompt_tokens=5)
    folded = Folded()
    ids = _ENC.encode(script, allowed_special="all")
    for e in [*parser.feed(Chunk(token_ids=tuple(ids))), *parser.feed(Chunk(finish=Finish("eos"))),
              *parser.close()]:
        folded.add(e)
    return folded


FINAL = "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>"


@pytest.mark.parametrize("script", [
    "<|message|>SECRET<|end|>" + FINAL,  # no channel, first
    "<|channel|>commentary to=assistant<|message|>SECRET<|end|>" + FINAL,
    "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|message|>SECRET<|end|>" + FINAL,
    "<|constrain|>json<|message|>SECRET<|end|>" + FINAL,  # a content type, no channel
    "<|channel|>final to=assistant<|message|>SECRET<|end|>" + FINAL,
    "<|channel|>finale<|message|>SECRET<|end|>" + FINAL,  # a channel Harmony does not define
    "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|constrain|>json<|message|>SECRET<|end|>"
    + FINAL,
])
def test_the_reproducers_are_reasoning(script: str) -> None:
    folded = _fold(script)
    assert (folded.content, folded.finish_reason, folded.error) == ("Answer.", "stop", None)
    assert "SECRET" in folded.reasoning


def test_a_channel_marker_without_a_name_is_malformed() -> None:
    with pytest.raises(HarmonyFormatError):
        _fold("<|channel|><|message|>SECRET<|end|>" + FINAL)


def test_final_with_a_content_type_is_still_the_answer() -> None:
    assert _fold("<|channel|>final <|constrain|>json<|message|>{}<|return|>").content == "{}"
