"""app.engine.replay: readers from any point, live following, leaving, several readers."""

from __future__ import annotations

import asyncio

from app.engine.replay import Replay


def _p(seq: int) -> dict[str, object]:
    return {"type": "x", "sequence_number": seq}


async def _drain(reader: object) -> list[dict[str, object]]:
    return [p async for batch in reader for p in batch]  # type: ignore[attr-defined]


async def test_backlog_then_live_then_end() -> None:
    replay = Replay()
    for i in range(3):
        replay.push(_p(i))
    whole, tail = replay.reader(), replay.reader(after=1)
    task = asyncio.ensure_future(_drain(whole))
    await asyncio.sleep(0)
    replay.push(_p(3))
    replay.end()
    assert [p["sequence_number"] for p in await task] == [0, 1, 2, 3]
    assert [p["sequence_number"] for p in await _drain(tail)] == [2, 3]
    late = replay.reader(after=0)  # after the end: the log, then its end
    assert [p["sequence_number"] for p in await _drain(late)] == [1, 2, 3]


async def test_a_reader_that_leaves_stops_receiving_and_cancels_nothing() -> None:
    replay = Replay()
    stopped: list[object] = []
    reader = replay.reader(stop=stopped.append)
    replay.push(_p(0))
    assert await reader.__anext__() == [_p(0)]
    await reader.aclose()
    replay.push(_p(1))  # the run goes on; nothing queues for the reader that left
    assert replay.events == [_p(0), _p(1)] and stopped == []
    replay.end()


async def test_stop_reaches_the_run_only_while_it_runs() -> None:
    replay = Replay()
    stopped: list[object] = []
    replay.reader(stop=stopped.append).stop(RuntimeError("shutdown"))  # type: ignore[arg-type]
    replay.end()
    replay.reader(stop=stopped.append).stop(RuntimeError("late"))  # type: ignore[arg-type]
    assert len(stopped) == 1
