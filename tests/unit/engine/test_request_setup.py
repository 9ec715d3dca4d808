"""Per-request setup made cheaper without changing what it decides (app/engine): a backend's
window discovery found from its class (any instance that offers ``context_window`` still counts),
and the model's defaults applied only where the request left a value unset."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from adapters.base import WindowDiscovery
from app.config import GatewayConfig
from app.core.conversation import GenerationParams
from app.engine import generation
from app.engine.registry import Registry


class Discovers:
    def __init__(self) -> None:
        self.calls = 0

    async def context_window(self) -> int | None:
        self.calls += 1
        return 512


class Plain:
    pass


class Late:
    """Offers ``context_window`` on the instance only (not its class)."""

    def __init__(self) -> None:
        async def window() -> int | None:
            return 256

        self.context_window = window


def route(backend: Any, window: int = 1024) -> generation.ModelRoute:
    return generation.ModelRoute("m", backend, context_window=window)


async def test_window_discovery_is_what_isinstance_says() -> None:
    found = Discovers()
    assert await generation.context_window(route(found)) == 512 and found.calls == 1
    assert await generation.context_window(route(found)) == 512 and found.calls == 2  # cached class
    assert await generation.context_window(route(Plain())) == 1024
    assert await generation.context_window(route(Late())) == 256
    backends: list[Any] = [found, Plain(), Late()]
    for backend in backends:
        assert generation._discovers_window(backend) == isinstance(backend, WindowDiscovery)


def registry(**defaults: Any) -> Registry:
    config = GatewayConfig.model_validate({"store": {"path": ":memory:"}, "models": {
        "m": {"backend": "llamacpp", "base_urls": ["http://m.test:8080"], "defaults": defaults}}})
    return Registry(config, httpx.AsyncClient())


@pytest.mark.parametrize("defaults", [{}, {"temperature": 0.3}, {"top_p": 0.9}, {"max_tokens": 64},
                                      {"reasoning_effort": "high"}])
@pytest.mark.parametrize("params", [GenerationParams(), GenerationParams(temperature=1.0, top_p=0.5),
                                    GenerationParams(max_tokens=9, reasoning_effort="low")])
def test_defaults_fill_only_what_the_request_left_unset(defaults: dict[str, Any],
                                                         params: GenerationParams) -> None:
    got = registry(**defaults).with_defaults("m", params)
    for name in ("temperature", "top_p", "max_tokens", "reasoning_effort"):
        mine = getattr(params, name)
        assert getattr(got, name) == (mine if mine is not None else defaults.get(name))
    assert got.seed == params.seed and got.tool_choice == params.tool_choice
    if all(getattr(params, name) is not None or name not in defaults for name in defaults):
        assert got is params  # nothing to fill in: the same object, no copy
