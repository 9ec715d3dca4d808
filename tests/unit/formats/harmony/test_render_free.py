"""A long prompt's working lists are freed in pieces (app/core/shed.py) by the thread that
rendered it: one dealloc of 100,000 history messages, or a second copy of 700,000 token ids,
held the GIL ~9-10 ms each, a stall of the event loop while the render ran in a thread."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.conversation import Conversation, GenerationParams, Message, TextPart, ToolChoice
from app.core.shed import shed as shed_pieces
from app.formats.harmony import render
from app.formats.harmony.render import HarmonyOptions, render_harmony

OPTS = HarmonyOptions(current_date="2026-11-28")


@pytest.mark.parametrize("choice", [ToolChoice("auto"), ToolChoice("required")])
def test_the_history_and_the_ids_are_freed_in_pieces(choice: ToolChoice,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    conv = Conversation(tuple(Message(("user", "assistant")[i % 2], (TextPart(f"m{i}"),))
                              for i in range(2000)))
    whole = render_harmony(conv, GenerationParams(tool_choice=choice), OPTS)
    freed: list[tuple[type, int]] = []
    real = shed_pieces

    def shed(items: list[Any]) -> None:
        freed.append((type(items[0]), len(items)))
        real(items)

    monkeypatch.setattr(render, "shed", shed)
    prompt = render_harmony(conv, GenerationParams(tool_choice=choice), OPTS)
    assert prompt == whole  # the same prompt, its prefill at the end
    assert prompt.token_ids is not None
    assert prompt.token_ids[len(prompt.token_ids) - len(prompt.prefill_ids):] == prompt.prefill_ids
    assert (choice.mode == "required") == bool(prompt.prefill_ids)
    assert freed == [(render._Text, 2000), (int, len(prompt.token_ids))]
