"""Counting a prompt (app/engine/count.py): a long conversation is rendered and counted in a
worker thread, only the number comes back to the event loop, and the token ids are freed there
in pieces; the count is the length of the prompt a run would send, short or long, Harmony or a
backend's tokenizer."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from app.config import GatewayConfig
from app.core.conversation import Conversation, GenerationParams, Message, TextPart
from app.core.shed import shed as shed_pieces
from app.engine import count, generation
from app.engine.registry import Registry
from tests.support.fake_template_llamacpp import FakeTemplateLlamaCpp


def registry(**model: Any) -> Registry:
    config = GatewayConfig.model_validate({"store": {"path": ":memory:"}, "models": {
        "m": {"backend": "llamacpp", "base_urls": ["http://m.test:8080"], "context_window": 8192,
              "harmony": {"current_date": "2026-11-28"}, **model}}})
    return Registry(config, httpx.AsyncClient())


def conversation(n: int) -> Conversation:
    return Conversation(tuple(Message(("user", "assistant")[i % 2], (TextPart(f"m{i}"),))
                              for i in range(n)))


@pytest.mark.parametrize("n", [3, generation.BIG_MESSAGES + 1, 20_000])
async def test_the_count_is_the_rendered_prompt_s_length(n: int) -> None:
    reg = registry()
    conv, params = conversation(n), GenerationParams()
    route = reg.route("m")
    await route.format.prepare()
    expected = len(generation.render(route, conv, reg.with_defaults("m", params)).token_ids or ())
    counted = await count.count_tokens(reg, "m", conv, params)
    assert counted == count.TokenCount(expected, True) and expected > 5 * n


@pytest.mark.parametrize("n, off_loop", [(3, False), (generation.BIG_MESSAGES + 1, True)])
async def test_a_long_conversation_is_rendered_counted_and_freed_off_the_event_loop(
        n: int, off_loop: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[bool] = []
    freed: list[tuple[bool, int]] = []
    real_render, real_shed = generation.render, shed_pieces

    def render(*args: Any) -> Any:
        rendered.append(threading.current_thread() is not threading.main_thread())
        return real_render(*args)

    def shed(items: list[Any]) -> None:
        freed.append((threading.current_thread() is not threading.main_thread(), len(items)))
        real_shed(items)

    monkeypatch.setattr(count, "render", render)
    monkeypatch.setattr(generation, "render", render)
    monkeypatch.setattr(count, "shed", shed)
    counted = await count.count_tokens(registry(), "m", conversation(n), GenerationParams())
    assert rendered == [off_loop]
    # the ids were freed in the thread that counted them (the loop only ever sees the number)
    assert freed == ([(True, counted.tokens)] if off_loop else [])


async def test_a_backend_tokenizer_still_counts_a_long_template_prompt() -> None:
    """No token ids rendered in the gateway: the thread hands the prompt back to be tokenized by
    llama.cpp, and the count is what tokenizing it on the event loop gives."""
    fake = FakeTemplateLlamaCpp(["Hi"])

    def upstream(request: httpx.Request) -> httpx.Response:  # no /props here: POSTs only
        return fake(request) if request.method == "POST" else httpx.Response(404)

    config = GatewayConfig.model_validate({"store": {"path": ":memory:"}, "models": {"m": {
        "backend": "llamacpp", "base_urls": ["http://m.test:8080"], "context_window": 8192,
        "prompt_format": "template", "template": {"builtin": "gemma3"}}}})
    reg = Registry(config, httpx.AsyncClient(transport=httpx.MockTransport(upstream)))
    conv, params = conversation(generation.BIG_MESSAGES + 1), GenerationParams()
    route = reg.route("m")
    await route.format.prepare()
    inline = await generation.render_tokens(route, conv, reg.with_defaults("m", params), big=False)
    counted = await count.count_tokens(reg, "m", conv, params)
    assert counted == count.TokenCount(len(inline.token_ids or ()), True) and counted.tokens > 1000
