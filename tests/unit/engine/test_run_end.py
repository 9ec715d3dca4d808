"""A stored run's end: its terminal is heard only once the end is stored (retried across a short
outage, idempotently); an end that cannot be stored is a ``store_unavailable`` failure, never
``completed``.  And a follower on another replica (:class:`RemoteReader`) ends with what the
store records when Redis fails or goes quiet, never cut."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from app.api.responses.encode import ResponsesEncoder
from app.core import events as ev
from app.core.access import ANONYMOUS
from app.core.errors import GatewayError, ServerShutdown
from app.core.output import Usage
from app.engine import run as run_module
from app.engine.run import EndNotStored, Run
from app.engine.signals import RemoteReader

pytestmark = pytest.mark.asyncio
Json = dict[str, Any]
DONE = [ev.TextDelta("hi"), ev.PartDone("text"), ev.Finished("stop", Usage(1, 1))]


class FlakyStore:
    """Hooks whose ``ended`` fails ``failures`` times (a store that is away), recording when the
    client heard the terminal relative to the successful write."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.stored: Json | None = None
        self.tried = asyncio.Event()

    async def started(self, run: Run) -> None:
        return None

    async def ended(self, run: Run) -> None:
        self.attempts += 1
        self.tried.set()
        if self.attempts <= self.failures:
            raise OSError("store away")
        assert isinstance(run.encoder, ResponsesEncoder)
        self.stored = run.encoder.snapshot()


async def _source(events: list[ev.Event]) -> Any:
    for event in events:
        yield event


def responses_run(hooks: FlakyStore, mode: Any = "stream") -> Run:
    resource: Json = {"id": "resp_1", "status": "in_progress", "output": [], "error": None}
    return Run("resp_1", "m", ANONYMOUS, ResponsesEncoder(resource), mode, hooks, {})


async def test_the_terminal_waits_for_the_end_to_be_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    """While its end is retried the run stays registered (its heartbeat goes on: no other
    replica declares it lost; shutdown waits for it), marked ``ending``."""
    monkeypatch.setattr(run_module, "END_WAIT", 5.0)
    store = FlakyStore(failures=3)
    registry: dict[str, Run] = {}
    resource: Json = {"id": "resp_1", "status": "in_progress", "output": [], "error": None}
    run = Run("resp_1", "m", ANONYMOUS, ResponsesEncoder(resource), "stream", store, registry)
    run.begin(_source(DONE))
    await asyncio.wait_for(store.tried.wait(), 5)
    assert registry == {"resp_1": run} and run.ending
    heard: list[Json] = []
    async for payload in run.frames():
        if payload["type"] == "response.completed":
            assert store.stored is not None and store.stored["status"] == "completed"
        heard.append(payload)
    assert heard[-1]["type"] == "response.completed" and store.attempts == 4
    assert registry == {}
    assert [p["sequence_number"] for p in heard] == list(range(len(heard)))


async def test_an_end_that_cannot_be_stored_is_a_store_error_not_completed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "END_WAIT", 0.3)
    streamed = responses_run(FlakyStore(failures=100))
    streamed.begin(_source(DONE))
    heard = [p async for p in streamed.frames()]
    kinds = [p["type"] for p in heard]
    assert "response.completed" not in kinds and kinds[-2:] == ["error", "response.failed"]
    assert heard[-1]["response"]["status"] == "failed"
    assert heard[-1]["response"]["error"]["code"] == "store_unavailable"
    assert [p["sequence_number"] for p in heard] == list(range(len(heard)))  # no gap
    waited = responses_run(FlakyStore(failures=100), mode="wait")
    waited.begin(_source(DONE))
    with pytest.raises(EndNotStored) as raised:
        await waited.result()
    assert raised.value.status == 503 and raised.value.retry_after >= 1


class FakeRedis:
    """``xread`` answers from ``entries`` once, then blocks (quiet) or raises (down)."""

    def __init__(self, entries: list[tuple[bytes, dict[bytes, bytes]]], down: bool = False) -> None:
        self.entries = entries
        self.down = down
        self.calls = 0

    async def xread(self, streams: dict[str, str], count: int, block: int) -> Any:
        self.calls += 1
        if self.entries:
            entries, self.entries = self.entries, []
            return [(b"ocm:events:resp_1", entries)]
        if self.down:
            raise RedisConnectionError("gone")
        await asyncio.sleep(block / 1000)
        return []


class Settled:
    def __init__(self, after_checks: int, events: list[Json]) -> None:
        self.after_checks = after_checks
        self.checks = 0
        self.events = events

    async def ended(self, after: int | None) -> list[Json] | None:
        self.checks += 1
        if self.checks < self.after_checks:
            return None
        return [e for e in self.events if after is None or e["sequence_number"] > after]

    def error(self, after: int | None, reason: GatewayError) -> list[Json]:
        return [{"type": "error", "sequence_number": after, "code": reason.code}]


def _entry(seq: int) -> tuple[bytes, dict[bytes, bytes]]:
    import orjson

    return (f"1-{seq}".encode(), {b"e": orjson.dumps({"type": "x", "sequence_number": seq})})


@pytest.mark.parametrize("down", [True, False], ids=["redis-down", "owner-quiet"])
async def test_a_follower_ends_with_the_stored_events_it_has_not_sent(down: bool) -> None:
    stored = [{"type": "x", "sequence_number": n} for n in range(4)] + [
        {"type": "response.failed", "sequence_number": 4}]
    reader = RemoteReader(FakeRedis([_entry(0), _entry(1), _entry(2)], down=down), "resp_1", 0,
                          Settled(2, stored), check_seconds=0.05)
    got = [p async for batch in reader for p in batch]
    assert [p["sequence_number"] for p in got] == [1, 2, 3, 4] and got[-1]["type"] == "response.failed"


async def test_a_follower_stopped_by_shutdown_says_so() -> None:
    reader = RemoteReader(FakeRedis([_entry(0)]), "resp_1", None, Settled(10**6, []),
                          check_seconds=0.05)
    first = await reader.__anext__()
    reader.stop(ServerShutdown("bye"))
    assert await reader.__anext__() == [{"type": "error", "sequence_number": 0, "code": "server_shutdown"}]
    with pytest.raises(StopAsyncIteration):
        await reader.__anext__()
    assert first[0]["sequence_number"] == 0


async def test_a_follower_gives_up_only_when_neither_redis_nor_the_store_answers() -> None:
    class Away(Settled):
        async def ended(self, after: int | None) -> list[Json] | None:
            raise OSError("store away")

    reader = RemoteReader(FakeRedis([], down=True), "resp_1", 3, Away(0, []), check_seconds=0.05,
                          give_up_seconds=0.3)
    assert await asyncio.wait_for(reader.__anext__(), 5) == [
        {"type": "error", "sequence_number": 3, "code": "signals_unavailable"}]


async def test_a_client_leaving_while_the_end_is_stored_does_not_interrupt_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "END_WAIT", 5.0)
    store = FlakyStore(failures=3)
    run = responses_run(store)
    run.begin(_source(DONE))
    frames = run.frames()
    await asyncio.wait_for(store.tried.wait(), 5)
    await frames.aclose()  # the client went away: cancels the run, which has ended
    assert run.task is not None
    await asyncio.wait_for(run.task, 5)
    assert store.stored is not None and store.stored["status"] == "completed"


async def test_a_stored_chat_completion_that_cannot_be_stored_ends_with_an_error_chunk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.api.chat.encode import ChatEncoder

    class Away:
        async def started(self, run: Run) -> None:
            return None

        async def ended(self, run: Run) -> None:
            raise OSError("store away")

    monkeypatch.setattr(run_module, "END_WAIT", 0.3)
    enc = ChatEncoder("chatcmpl-1", "m", 0, include_usage=True, logprobs=False, stream=True)
    run = Run("chatcmpl-1", "m", ANONYMOUS, enc, "stream", Away(), {})
    run.begin(_source(DONE))
    heard = [p async for p in run.frames()]
    assert heard[-1]["error"]["code"] == "store_unavailable"
    assert all(c["finish_reason"] is None for p in heard[:-1] for c in p["choices"])
