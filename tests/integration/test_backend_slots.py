"""Each llama.cpp backend bounded by its slots: a real llama-server with ``-np 2`` behind a proxy
that counts the generations it is asked for (:mod:`tests.support.slot_proxy`), the real gateway
in front.  Six concurrent requests reach it at most two at a time (and six at once when the
config allows six: the count can see more); a client that leaves while queued in the gateway
never reaches it; after a restart with three slots, three go at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import run_gateway
from tests.support.fixtures import SCRIPT_FINAL
from tests.support.llama_slots import llama_server_slots
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model
from tests.support.slot_proxy import SlotProxy, slot_proxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ANSWER = "Hello from a scripted tiny model!"
HOLD = 0.4  # seconds the proxy holds each answer: concurrent generations overlap for certain


def _config(path: Path, url: str, *extra: str) -> Path:
    path.write_text("\n".join([
        "[store]", f'path = "{path.with_suffix(".sqlite3")}"', "",
        '[models."final"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]', "context_window = 2048",
        *extra, '[models."final".harmony]', 'current_date = "2026-11-28"', ""]))
    return path


@pytest.fixture(scope="module")
def model() -> Path:
    return scripted_model("final", SCRIPT_FINAL)


@pytest.fixture(scope="module")
def two_slots(model: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[SlotProxy, Running, Running]]:
    """(proxy, gateway with the automatic bound, gateway configured for six)."""
    tmp = tmp_path_factory.mktemp("slots")
    with llama_server_slots(model, 2) as llama, slot_proxy(llama, hold=HOLD) as proxy, \
            run_gateway(_config(tmp / "auto.toml", proxy.url)) as auto, \
            run_gateway(_config(tmp / "six.toml", proxy.url, "max_inflight = 6")) as six:
        yield proxy, auto, six


async def _ask(client: httpx.AsyncClient, stream: bool = False) -> httpx.Response:
    return await client.post("/v1/chat/completions", json={
        "model": "final", "stream": stream, "messages": [{"role": "user", "content": "Hi"}]})


async def _burst(gateway: str, proxy: SlotProxy, n: int) -> float:
    proxy.reset()
    t0 = time.monotonic()
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as client:
        answers = await asyncio.gather(*(_ask(client) for _ in range(n)))
    for r in answers:
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == ANSWER
    return time.monotonic() - t0


async def test_six_requests_reach_a_two_slot_server_two_at_a_time(
        two_slots: tuple[SlotProxy, Running, Running]) -> None:
    proxy, auto, six = two_slots
    took = await _burst(auto.url, proxy, 6)
    assert proxy.sent == 6 and proxy.peak == 2
    assert took >= 3 * HOLD  # three rounds of two
    await _burst(six.url, proxy, 6)  # configured: all six sent at once, llama.cpp queues four
    assert proxy.sent == 6 and proxy.peak > 2


async def test_a_client_that_leaves_while_queued_never_reaches_the_server(
        two_slots: tuple[SlotProxy, Running, Running]) -> None:
    proxy, auto, _ = two_slots
    proxy.reset()
    async with httpx.AsyncClient(base_url=auto.url, timeout=60) as client:
        busy = [asyncio.create_task(_ask(client, stream=True)) for _ in range(2)]
        for _ in range(1000):  # (the proxy counts in its own thread)
            if proxy.sent >= 2:
                break
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=auto.url, timeout=0.2) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                await _ask(impatient)  # queued behind the two; gives up after 0.2 s
        for r in await asyncio.gather(*busy):
            assert r.status_code == 200 and ANSWER.split()[0] in r.text
        await asyncio.sleep(HOLD + 0.2)
        assert proxy.sent == 2 and proxy.peak == 2  # the one that left was never sent
        after = await _ask(client)
    assert after.status_code == 200 and proxy.sent == 3


async def test_a_restarted_server_with_more_slots_gets_them(model: Path, tmp_path: Path) -> None:
    with llama_server_slots(model, 2) as first, slot_proxy(first, hold=HOLD) as proxy, \
            run_gateway(_config(tmp_path / "gw.toml", proxy.url)) as gw:
        await _burst(gw.url, proxy, 6)
        assert proxy.peak == 2
        proxy.retarget("http://127.0.0.1:9")  # the server is gone: a failed request
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as client:
            down = await _ask(client)
        assert down.status_code in (502, 503, 504), down.text
        with llama_server_slots(model, 3) as second:
            proxy.retarget(second)
            await _burst(gw.url, proxy, 6)
            assert proxy.sent == 6 and proxy.peak == 3
