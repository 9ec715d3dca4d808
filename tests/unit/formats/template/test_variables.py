"""Template variables from the request: ``chat_template_kwargs`` and the thinking switch driven by
``reasoning_effort``, rendered by the model's real template and read back by its decoder."""

from __future__ import annotations

from app.core.conversation import Conversation, GenerationParams, Message, TextPart
from app.core.output import Chunk, Finish
from app.formats.catalog import TemplateFormat
from tests.unit.formats.template.analysis.roundtrip import TEMPLATES

CONV = Conversation((Message("user", (TextPart("What is 2+2?"),)),))


def _tail(params: GenerationParams, name: str = "HuggingFaceTB-SmolLM3-3B") -> str:
    prompt = TemplateFormat((TEMPLATES / f"{name}.jinja").read_text()).render(CONV, params)
    return "".join(text for text, _ in prompt.segments)[-40:]


def test_reasoning_effort_none_turns_a_template_thinking_switch_off() -> None:
    assert _tail(GenerationParams()).endswith("<|im_start|>assistant\n")  # the template's default
    assert _tail(GenerationParams(thinking=True)).endswith("<|im_start|>assistant\n")
    assert _tail(GenerationParams(thinking=False)).endswith("<think>\n\n</think>\n")


def test_chat_template_kwargs_reach_the_template_and_win_over_the_effort() -> None:
    off = GenerationParams(thinking=True, template_kwargs=(("enable_thinking", False),))
    assert _tail(off).endswith("<think>\n\n</think>\n")
    on = GenerationParams(thinking=False, template_kwargs=(("enable_thinking", True),))
    assert _tail(on).endswith("<|im_start|>assistant\n")


def test_with_thinking_off_the_answer_is_content() -> None:
    fmt = TemplateFormat((TEMPLATES / "HuggingFaceTB-SmolLM3-3B.jinja").read_text())
    for thinking, text, expected in [
        (False, "It is 4.", ("", "It is 4.")),
        (True, "<think>2+2</think>It is 4.", ("2+2", "It is 4.")),
    ]:
        prompt = fmt.render(CONV, GenerationParams(thinking=thinking))
        parser = fmt.parser(prompt, 10)
        events = parser.feed(Chunk(text)) + parser.feed(Chunk(finish=Finish("eos"))) + parser.close()
        got = ("".join(getattr(e, "text", "") for e in events if type(e).__name__ == "ReasoningDelta"),
               "".join(getattr(e, "text", "") for e in events if type(e).__name__ == "TextDelta"))
        assert got == expected
