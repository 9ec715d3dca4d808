"""The hold on full collections (app/http/gc_hold.py): counted, capped, restored; and held by
a big request from its body to its answer, not by a small one."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from app.http import body as body_module
from app.http.body import BIG_BODY
from app.http.gc_hold import HOLD, OUT_OF_REACH, CollectionHold
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    yield before
    assert gc.get_threshold() == before, "a hold was left behind"
    assert HOLD.holders == 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _full_collections(work: Any) -> int:
    """Generation-2 collections the collector starts by itself while ``work()`` runs."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.freeze()  # as the gateway after start-up (app/main.py): the old generation starts small
    gc.collect()
    gc.callbacks.append(count)
    try:
        work()
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
    return len(seen)


def test_holders_are_counted_and_the_last_release_restores_the_thresholds(
        thresholds: tuple[int, int, int]) -> None:
    hold = CollectionHold()
    first = hold.acquire()
    assert gc.get_threshold() == (thresholds[0], thresholds[1], OUT_OF_REACH) and hold.active
    second = hold.acquire()
    first()
    first()  # a second call of one release does nothing
    assert hold.active and hold.holders == 1
    second()
    assert not hold.active and hold.holders == 0 and gc.get_threshold() == thresholds
    assert hold._on_collection not in gc.callbacks


def test_many_surviving_objects_start_no_full_collection_while_held() -> None:
    def build() -> None:
        kept: list[list[int]] = [[] for _ in range(300_000)]  # tracked containers that survive
        assert kept

    assert gc.isenabled()
    assert _full_collections(build) >= 1  # the control: without a hold they do
    release = CollectionHold().acquire()
    try:
        assert _full_collections(build) == 0
    finally:
        release()


def test_young_collections_go_on_while_held() -> None:
    release = CollectionHold().acquire()
    try:
        def cycles() -> None:
            for _ in range(50_000):
                a: list[Any] = []
                a.append(a)  # garbage only the collector frees

        young: list[int] = []
        gc.callbacks.append(lambda phase, info: young.append(info["generation"]) if phase == "stop" else None)
        try:
            cycles()
        finally:
            gc.callbacks.pop()
        assert young and max(young) < 2
    finally:
        release()


def test_the_cap_lifts_a_hold_at_the_next_young_collection(thresholds: tuple[int, int, int]) -> None:
    clock = Clock()
    hold = CollectionHold(cap=5.0, clock=clock)
    release = hold.acquire()
    clock.now += 4.0
    gc.collect(0)
    assert hold.active
    clock.now += 2.0
    gc.collect(0)  # a young collection past the cap lifts it, holders or not
    assert not hold.active and hold.holders == 1 and gc.get_threshold() == thresholds
    again = hold.acquire()  # a stream of big requests does not renew it
    assert not hold.active and gc.get_threshold() == thresholds
    release()
    again()
    assert hold.holders == 0
    fresh = hold.acquire()  # once every holder has gone, the next big request holds again
    assert hold.active
    fresh()


def test_the_cap_is_checked_on_acquire_too(thresholds: tuple[int, int, int]) -> None:
    clock = Clock()
    hold = CollectionHold(cap=5.0, clock=clock)
    release = hold.acquire()
    clock.now += 6.0
    other = hold.acquire()
    assert not hold.active and gc.get_threshold() == thresholds
    release()
    other()


def _input_tokens_body(n: int) -> dict[str, Any]:
    return {"model": MODEL, "input": [{"role": "user", "content": f"message {i} " + "x" * 30}
                                      for i in range(n)]}


@pytest.mark.parametrize("n, held", [(40_000, True), (10, False)])
async def test_a_big_request_holds_from_its_body_to_its_answer(n: int, held: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    validate = body_module.validate_body

    def spy(field: Any, value: Any) -> Any:
        seen.append(HOLD.holders)
        return validate(field, value)

    monkeypatch.setattr(body_module, "validate_body", spy)
    body = _input_tokens_body(n)
    async with gateway(FakeLlamaCpp("<|channel|>final<|message|>Hi.<|return|>").transport()) as c:
        r = await c.post("/v1/responses/input_tokens", json=body)
        assert r.status_code == 200, r.text
        assert HOLD.holders == 0 and not HOLD.active  # released once the route has answered
        refused = [{"role": "user", "content": 5, "pad": "x" * 40}] * n
        r = await c.post("/v1/responses/input_tokens", json={**body, "input": refused})
        assert r.status_code == 400  # an error answer releases it too
        assert HOLD.holders == 0 and not HOLD.active
    big = len(str(body)) > BIG_BODY
    assert big is held
    assert seen == ([1, 1] if held else [])  # a small body is validated by FastAPI itself
