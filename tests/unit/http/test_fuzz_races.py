"""The generation fuzzer with requests that race (issue 35, item 10): concurrent turns on one
conversation, a background run cancelled or deleted while it streams, a follower of a
background stream while it is cancelled. On top of the invariants of
``test_fuzz_generation.py``: every completed turn is appended to its conversation, a cancelled
run ends ``cancelled`` with one terminal event for its follower, and what was deleted stays
deleted when its run ends afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from tests.support import fuzz_bodies as fb
from tests.support.fuzz_bodies import KEYS
from tests.support.fuzz_checks import check_status, responses_events
from tests.unit.http.test_fuzz_generation import EXAMPLES, FIRST, SEEDS, STATS, GenerationMachine

pytestmark = pytest.mark.timeout(0 if EXAMPLES else 120)
Json = dict[str, Any]
SLOW = ["slow", "slow", "slow"]  # every attempt: a run that lasts long enough to race


class RaceMachine(GenerationMachine):
    def send_all(self, requests: list[tuple[str, str, Json | None]], seed: int, queue: list[str],
                 ) -> list[httpx.Response]:
        """Several requests at once (their upstream answers: ``queue`` first, then drawn)."""
        self.upstream.reseed(seed, queue)
        headers = {"authorization": f"Bearer {KEYS['a']}"}

        async def all_of() -> list[httpx.Response]:
            return list(await asyncio.gather(*(self.client.request(m, p, json=b, headers=headers)
                                               for m, p, b in requests)))
        answers = self.loop.run_until_complete(all_of())
        for (_, path, _), r in zip(requests, answers, strict=True):
            code = r.json()["error"]["code"] if r.status_code >= 400 else ""
            STATS.statuses[("race " + path.split("/")[2], r.status_code, str(code))] += 1
            check_status(r)
        return answers

    @precondition(lambda self: bool(self.conversations))
    @rule(data=st.data(), turns=st.integers(2, 4), models=st.lists(fb.MODELS, min_size=4, max_size=4),
          seed=SEEDS, firsts=st.lists(FIRST, max_size=4))
    def concurrent_turns_on_a_conversation(self, data: st.DataObject, turns: int, models: list[str],
                                           seed: int, firsts: list[str]) -> None:
        cid = self.pick(data, self.conversations)
        before = self.count_items(cid)
        bodies = [{"model": models[k], "input": f"turn {k}", "conversation": cid} for k in range(turns)]
        answers = self.send_all([("POST", "/v1/responses", b) for b in bodies], seed, firsts)
        appended = sum(1 + len(r.json()["output"]) for r in answers
                       if r.status_code == 200 and r.json()["status"] == "completed")
        assert self.count_items(cid) >= before + appended

    @rule(model=fb.MODELS, delete=st.booleans(), wait=st.sampled_from([0.0, 0.02, 0.1]), seed=SEEDS)
    def background_cancelled_or_deleted_mid_run(self, model: str, delete: bool, wait: float,
                                                seed: int) -> None:
        r = self.send_all([("POST", "/v1/responses", {"model": model, "input": "hi", "background": True})],
                          seed, SLOW)[0]
        if r.status_code != 200:
            return
        rid = r.json()["id"]
        self.loop.run_until_complete(asyncio.sleep(wait))
        if delete:
            assert self.send("DELETE", f"/v1/responses/{rid}").status_code == 200
            self.loop.run_until_complete(asyncio.sleep(0.5))  # the run would have ended meanwhile
            assert self.send("GET", f"/v1/responses/{rid}").status_code == 404, "deleted, then back"
            return
        cancel = self.send("POST", f"/v1/responses/{rid}/cancel")
        final = self.settle(rid)
        if cancel.status_code == 200:
            assert final["status"] == cancel.json()["status"] == "cancelled", (cancel.json(), final)
        self.responses[rid] = {"shape": None}

    @rule(model=fb.MODELS, wait=st.sampled_from([0.0, 0.02, 0.1]), seed=SEEDS)
    def follower_of_a_cancelled_stream(self, model: str, wait: float, seed: int) -> None:
        r = self.send_all([("POST", "/v1/responses", {"model": model, "input": "hi", "background": True})],
                          seed, SLOW)[0]
        if r.status_code != 200:
            return
        rid = r.json()["id"]

        headers = {"authorization": f"Bearer {KEYS['a']}"}

        async def cancel_later() -> httpx.Response:
            await asyncio.sleep(wait)
            return await self.client.post(f"/v1/responses/{rid}/cancel", headers=headers)

        async def both() -> tuple[httpx.Response, httpx.Response]:
            follow = self.client.get(f"/v1/responses/{rid}?stream=true", headers=headers)
            return await asyncio.gather(follow, cancel_later())
        follow, cancelled = self.loop.run_until_complete(both())
        check_status(follow)
        check_status(cancelled)
        if follow.status_code == 200:
            responses_events(follow)  # one terminal event, whatever it was
        final = self.settle(rid)
        if cancelled.status_code == 200:
            assert final["status"] == "cancelled"


def test_races_hold_the_invariants() -> None:
    run_state_machine_as_test(RaceMachine, settings=settings(
        max_examples=EXAMPLES or 8, stateful_step_count=8, derandomize=EXAMPLES == 0, database=None,
        deadline=None, suppress_health_check=list(HealthCheck), print_blob=True))
