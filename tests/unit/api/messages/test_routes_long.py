"""A long conversation on ``/v1/messages`` and ``/v1/messages/count_tokens`` is converted in a
worker thread (``routes.BIG`` messages and more), never on the event loop; a short one inline.
The count is the same either way: the prompt the create sends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from app.api.messages import routes
from app.api.messages.ingest import conversation_of as real_count
from app.api.messages.ingest import ingest_messages as real_create
from tests.support.anthropic_sdk import clients
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL

ANSWER = "<|channel|>final<|message|>Hi.<|return|>"


def _off_loop(real: Callable[..., Any], calls: list[bool]) -> Callable[..., Any]:
    """``real``, noting in ``calls`` whether each call ran off the event loop's thread."""

    def watched(*args: Any) -> Any:
        calls.append(threading.current_thread() is not threading.main_thread())
        return real(*args)

    return watched


def _turns(n: int) -> list[Any]:
    return [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(n)]


@pytest.mark.parametrize("n, off_loop", [(3, False), (routes.BIG + 1, True)])
async def test_long_conversations_are_converted_off_the_event_loop(
        n: int, off_loop: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[bool] = []
    monkeypatch.setattr(routes, "conversation_of", _off_loop(real_count, threads))
    monkeypatch.setattr(routes, "ingest_messages", _off_loop(real_create, threads))
    upstream = FakeLlamaCpp(ANSWER)
    async with clients(upstream.transport()) as c:
        counted = await c.sdk.messages.count_tokens(model=MODEL, messages=_turns(n))
        await c.sdk.messages.create(model=MODEL, max_tokens=20, messages=_turns(n))
    assert threads == [off_loop, off_loop]
    assert counted.input_tokens == len(upstream.requests[0]["prompt"])


@pytest.mark.parametrize("n, off_loop", [(3, []), (routes.BIG + 1, [True])])
async def test_a_long_count_is_scanned_for_documents_and_freed_off_the_event_loop(
        n: int, off_loop: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan for documents to read walks every block (100,000 messages: ~15 ms on the loop),
    and the converted conversation is freed in pieces (its one dealloc held the loop ~15 ms)."""
    scanned: list[bool] = []
    freed: list[int] = []
    real_free = routes.shed_later

    def shed_later(*groups: Any) -> None:
        freed.extend(len(g) for g in groups)
        real_free(*groups)

    monkeypatch.setattr(routes, "has_sources", _off_loop(routes.has_sources, scanned))
    monkeypatch.setattr(routes, "shed_later", shed_later)
    upstream = FakeLlamaCpp(ANSWER)
    async with clients(upstream.transport()) as c:
        counted = await c.sdk.messages.count_tokens(model=MODEL, messages=_turns(n))
        await c.sdk.messages.create(model=MODEL, max_tokens=20, messages=_turns(n))
    assert scanned == off_loop and freed == ([n] if off_loop else [])
    assert counted.input_tokens == len(upstream.requests[0]["prompt"])
