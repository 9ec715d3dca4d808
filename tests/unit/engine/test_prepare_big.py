"""Planning a long conversation (app/engine/generation.py ``prepare``): the floor check (a sum
over every message) runs in a worker thread with the render, and a prompt refused as too long
has its token ids freed in pieces off the event loop (700,000 ids dropped at once held it ~10 ms)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.core.conversation import GenerationParams
from app.core.errors import ContextLengthExceeded
from app.engine import generation
from tests.unit.engine.test_count import conversation, registry


@pytest.mark.parametrize("n, big", [(3, False), (generation.BIG_MESSAGES + 1, True)])
async def test_the_floor_check_runs_where_the_render_does(n: int, big: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    where: list[bool] = []
    real = generation.check_floor

    def check_floor(*args: Any) -> None:
        where.append(threading.current_thread() is not threading.main_thread())
        real(*args)

    monkeypatch.setattr(generation, "check_floor", check_floor)
    route = registry().route("m")
    prepared = await generation.prepare(route, conversation(n), GenerationParams(max_tokens=16))
    assert where == [big] and prepared.prompt.token_ids


@pytest.mark.parametrize("n, big", [(1500, False), (generation.BIG_MESSAGES * 8, True)])
async def test_a_long_prompt_refused_as_too_long_is_freed_off_the_loop(
        n: int, big: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    freed: list[int] = []
    monkeypatch.setattr(generation, "BIG_MESSAGES", 2000)  # 1,500 messages: rendered on the loop
    monkeypatch.setattr(generation, "shed_later", lambda *groups: freed.extend(len(g) for g in groups))
    route = registry().route("m")
    with pytest.raises(ContextLengthExceeded):  # ~7 tokens a message: past the 8,192 window
        await generation.prepare(route, conversation(n), GenerationParams(max_tokens=16))
    assert len(freed) == big and (not big or freed[0] > 8192)


def _with_schema(properties: int) -> Any:
    from dataclasses import replace

    from app.core.conversation import FunctionTool
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(properties)}}
    return replace(conversation(1), tools=(FunctionTool("f", parameters=schema),))


def test_a_large_tool_schema_makes_a_conversation_big() -> None:
    """Issue 35's neighbour: a 10,000-property schema (260 KB, a body the route parses on the
    loop) took ~0.6 s to render on the event loop: its JSON counts towards the bound."""
    assert not generation.is_big(_with_schema(10))
    assert generation.is_big(_with_schema(2_000))
    assert generation.is_big(_with_schema(10_000))
