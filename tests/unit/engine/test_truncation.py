"""``truncation: auto`` (app/engine/generation.py): the fewest oldest turns are dropped, found
by binary search, the same as dropping them one at a time."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.base import Capabilities
from app.core.conversation import Conversation, GenerationParams, Message, TextPart
from app.core.errors import ContextLengthExceeded
from app.engine.generation import ModelRoute, drop_oldest_turns, prepare, render
from app.formats.catalog import HarmonyFormat


@dataclass
class _Stub:
    """A backend the pipeline never calls here (Harmony prompts are token ids)."""

    kind: str = "stub"
    capabilities: Capabilities = field(default_factory=Capabilities)


def _conversation(lengths: list[int]) -> Conversation:
    messages = [Message("developer", (TextPart("Be kind."),))]
    for i, n in enumerate(lengths):
        messages += [Message("user", (TextPart(f"q{i} " + "word " * n),)),
                     Message("assistant", (TextPart(f"a{i}"),))]
    return Conversation((*messages, Message("user", (TextPart("latest"),))))


def _fits(route: ModelRoute, conv: Conversation, window: int) -> bool:
    prompt = render(route, conv, GenerationParams())
    return prompt.token_ids is not None and len(prompt.token_ids) < window


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=30), st.integers(120, 900))
@pytest.mark.asyncio
async def test_binary_search_drops_what_one_by_one_drops(lengths: list[int], window: int) -> None:
    route = ModelRoute("m", _Stub(), HarmonyFormat(), context_window=window)  # type: ignore[arg-type]
    conv = _conversation(lengths)
    linear, dropped = conv, 0  # the reference: drop the oldest turn until it fits
    while not _fits(route, linear, window):
        try:
            linear, n = drop_oldest_turns(linear)
        except ContextLengthExceeded:
            linear = None  # type: ignore[assignment]
            break
        dropped += n
    try:
        got = await prepare(route, conv, GenerationParams(), truncate=True)
    except ContextLengthExceeded:
        assert linear is None
        return
    assert linear is not None
    assert got.conversation == linear and got.dropped_messages == dropped


@pytest.mark.parametrize(("messages", "text", "in_thread"), [
    (3, 1_000, False),  # small: rendered on the event loop (a thread hop costs more)
    (3, 64_000, True),  # one long message (encoding 256 KB holds the loop ~40 ms)
    (600, 10, True),  # many short ones
])
@pytest.mark.asyncio
async def test_big_prompts_are_rendered_off_the_event_loop(messages: int, text: int,
                                                           in_thread: bool) -> None:
    import threading

    seen: list[bool] = []

    class Watching(HarmonyFormat):
        def render(self, conv: Conversation, params: GenerationParams):  # type: ignore[no-untyped-def]
            seen.append(threading.current_thread() is not threading.main_thread())
            return super().render(conv, params)

    route = ModelRoute("m", _Stub(), Watching(), context_window=1_000_000)  # type: ignore[arg-type]
    conv = Conversation(tuple(Message("user", (TextPart("x " * (text // 2)),))
                              for _ in range(messages)))
    await prepare(route, conv, GenerationParams())
    assert seen == [in_thread]
