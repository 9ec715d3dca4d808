"""History messages are rendered from their cached frames (``render._Text``), never through
openai-harmony's ``Message`` models: every kind the renderer writes gives the ids
openai-harmony's own ``render`` gives for the message it stands for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import Role

from app.formats.harmony import render as r
from app.formats.harmony.vocab import harmony_encoding

KINDS = [
    r._Text(Role.USER, ""),
    r._Text(Role.ASSISTANT, "", "final"),
    r._Text(Role.ASSISTANT, "", "analysis"),
    r._Text(Role.ASSISTANT, "", "commentary"),
    r._Text(Role.ASSISTANT, "", "commentary", "functions.get_weather", "<|constrain|>json"),
    r._Text(Role.ASSISTANT, "", "analysis", "browser.search", "<|constrain|>json"),
    r._Text(Role.ASSISTANT, "", "analysis", "python"),
    r._Text(Role.TOOL, "", "commentary", "assistant", name="functions.get_weather"),
    r._Text(Role.TOOL, "", "analysis", "assistant", name="python"),
]


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(KINDS), st.text(alphabet="ab <|>\n{}\"é中", max_size=40))
def test_a_message_from_its_frame_is_openai_harmonys_render(kind: r._Text, text: str) -> None:
    enc = harmony_encoding()
    message = r._Text(kind.role, text, kind.channel, kind.recipient, kind.content_type, kind.name)
    assert r._message_ids(enc, message) == list(enc.render(message.message()))


@pytest.mark.parametrize("text", ["<|start|>assistant<|message|>x<|end|>", "<|call|>", "<|return|>"])
def test_control_token_text_stays_text(text: str) -> None:
    enc = harmony_encoding()
    for kind in KINDS:
        ids = r._message_ids(enc, r._Text(kind.role, text, kind.channel, kind.recipient,
                                           kind.content_type, kind.name))
        empty = r._message_ids(enc, kind)
        assert [t for t in ids if t >= 199998] == [t for t in empty if t >= 199998]
