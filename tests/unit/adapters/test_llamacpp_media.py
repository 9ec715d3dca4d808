"""The multimodal /completion prompt object built from rendered segments."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.llamacpp_media import images_of, pieces, prompt_object, strip_prefix
from app.core.conversation import Conversation, GenerationParams, ImagePart, Message, TextPart
from app.core.errors import InvalidRequest
from app.core.media import image_segment
from app.core.prompt import Prompt
from app.engine.registry import builtin_template
from app.formats.catalog import TemplateFormat

IMG_A = image_segment("messages[0].content[1]", "QUFB")
IMG_B = image_segment("messages[0].content[3]", "QkJC")
SEGMENTS = [("<bos><start_of_turn>user\n", True), ("Look", False), (IMG_A, True), ("and", False),
            (IMG_B, True), ("<end_of_turn>\n<start_of_turn>model\n", True)]


def test_images_pieces_and_the_prompt_object() -> None:
    assert images_of(SEGMENTS) == [("messages[0].content[1]", "QUFB"), ("messages[0].content[3]", "QkJC")]
    assert [len(p) for p in pieces(SEGMENTS)] == [2, 1, 1]
    body = prompt_object(strip_prefix(SEGMENTS, "<bos>"), "<__m__>")
    assert body == {"prompt_string": "<start_of_turn>user\nLook<__m__>and<__m__><end_of_turn>\n"
                                     "<start_of_turn>model\n", "multimodal_data": ["QUFB", "QkJC"]}


def test_an_image_segment_is_only_ever_trusted() -> None:
    """The same text coming from a client is text, not an image."""
    assert images_of([(IMG_A, False)]) == [] and len(pieces([(IMG_A, False)])) == 1


def test_strip_prefix_only_strips_the_template_s_own_leading_text() -> None:
    assert strip_prefix([("<bos>", True), ("x", False)], "<bos>") == [("x", False)]
    assert strip_prefix([("<bos>", False)], "<bos>") == [("<bos>", False)]
    assert strip_prefix(SEGMENTS, "") == SEGMENTS


@pytest.mark.parametrize("segments", [
    [("x", True), ("hi <__m__>", False), (IMG_A, True)],  # typed in
    [("<__m", False), ("__>", True), (IMG_A, True)],  # formed across a segment boundary
])
def test_the_marker_in_other_text_is_refused(segments: list[tuple[str, bool]]) -> None:
    with pytest.raises(InvalidRequest) as info:
        prompt_object(segments, "<__m__>")
    assert info.value.code == "control_token_in_text"


@given(st.lists(st.tuples(st.text(max_size=8), st.booleans()), max_size=6), st.integers(0, 3))
def test_one_marker_per_image_or_a_400(texts: list[tuple[str, bool]], n: int) -> None:
    segments = texts + [(image_segment(f"p{i}", "QUFB"), True) for i in range(n)]
    try:
        body = prompt_object(segments, "<M>")
    except InvalidRequest:
        assert "<M>" in "".join(t for t, _ in texts) or any("<M" in t or "M>" in t for t, _ in texts)
        return
    assert str(body["prompt_string"]).count("<M>") == n == len(body["multimodal_data"])  # type: ignore[arg-type]


def test_a_gemma_template_puts_the_image_in_the_user_turn() -> None:
    source = builtin_template("gemma3")
    image = ImagePart("data:image/png;base64,QUFB")
    conv = Conversation((Message("user", (TextPart("Look "), image, TextPart(" now")), source="input[0]"),))
    prompt: Prompt = TemplateFormat(source, "<bos>", "<eos>").render(conv, GenerationParams())
    assert images_of(prompt.segments) == [("input[0].content[1]", "QUFB")]
    body = prompt_object(prompt.segments, "<M>")
    assert "<start_of_turn>user\nLook <M> now<end_of_turn>" in str(body["prompt_string"])
