"""Affinity through the real llama.cpp: two servers (one slot each) behind one model; two
conversations (``prompt_cache_key``) sent at once, in alternating order.  With affinity each
key keeps to its home server, which holds its prefix: every turn after the first reads it
from the KV cache (``usage.input_tokens_details.cached_tokens``, from llama.cpp's own
``timings.cache_n``).  (Without a key, least-outstanding routing gives whichever conversation
arrives first the first server, so a conversation moves between servers.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.routing import home_of
from tests.integration.conftest import run_gateway
from tests.support.fixtures import SCRIPT_FINAL
from tests.support.llama_server import llama_server
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
MODEL = "gpt-oss-two"
PREFIX = " ".join(f"Rule {n}: answer briefly and politely." for n in range(60))  # ~600 tokens


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, list[str]]]:
    tmp = tmp_path_factory.mktemp("affinity")
    model = scripted_model("final", SCRIPT_FINAL)
    with llama_server(model) as one, llama_server(model) as two:
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[store]", f'path = "{tmp / "s.sqlite3"}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{one}", "{two}"]',
            "context_window = 4096", f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"', ""]))
        with run_gateway(config) as running:
            yield running, [one, two]


async def _turns(gw: Running, keys: list[str | None], tag: str) -> list[list[int]]:
    """Two conversations (their own instructions), 4 turns, both sent at once each turn and
    in the other order every other turn (so without affinity which server gets which one
    changes); cached tokens per conversation and turn."""
    cached: list[list[int]] = [[], []]
    async with httpx.AsyncClient(timeout=60) as client:
        async def one(n: int, turn: int) -> None:
            body: dict[str, Any] = {"model": MODEL, "store": False, "input": f"Turn {turn}.",
                                    "instructions": f"{tag} conversation {n}. {PREFIX}"}
            if keys[n] is not None:
                body["prompt_cache_key"] = keys[n]
            r = await client.post(f"{gw.url}/v1/responses", json=body)
            assert r.status_code == 200, r.text
            cached[n].append(int(r.json()["usage"]["input_tokens_details"]["cached_tokens"]))

        for turn in range(4):
            order = (0, 1) if turn % 2 == 0 else (1, 0)
            await asyncio.gather(*(one(n, turn) for n in order))
    return cached


async def test_affinity_keeps_each_conversation_on_its_cached_server(
        gateway: tuple[Running, list[str]]) -> None:
    gw, urls = gateway
    keys = next((a, b) for a in (f"k{i}" for i in range(50)) for b in (f"j{i}" for i in range(50))
                if home_of(a, urls) != home_of(b, urls))  # two keys with different homes
    cached = await _turns(gw, list(keys), "A")
    for turns in cached:  # after its first turn, every turn found its prefix on its server
        assert turns[0] < 100 and min(turns[1:]) > 500, cached
