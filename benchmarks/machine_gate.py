"""What a bounded replica's gate costs a generation with ``--workers N`` and no Redis (the
machine's gate service, app/engine/gate_hub.py, through app/engine/machine_gate.py) against one
worker's own gate (``ReplicaGate``, in process).

``python -m benchmarks.machine_gate [--n 5000] [--rounds 3] [--concurrency 32]
[--tree LABEL=PATH ...]``: one generation's gate acquire and release (what
``adapters.routing.failover`` does around a bounded replica) ``--n`` times, one at a time and
``--concurrency`` at a time, for: a replica with no known bound behind a machine gate (no round
trip), a bounded replica's local gate, and its machine gate (a real service process, one
connection as one worker has); with a bound large enough that nobody waits, and with a bound of
4 (most requests queue: the "queued" answer and the grant).  Rounds are interleaved.  Reports µs
per generation (wall) and CPU µs (this process + the service's, from /proc); with ``--tree``,
each tree's and their ratios (:mod:`benchmarks.machine_harness`).  Markdown to stdout;
``--json FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from app.engine.admission import ReplicaGate
from app.engine.machine_gate import GateClient, MachineGate
from benchmarks.machine_harness import Case, Results, cli, interleaved, machine_service, timed

URL = "http://llama:8080"


async def _no_slots(url: str) -> int | None:
    return None


def _same_as_above(name: str, concurrency: int) -> bool:
    """One at a time nobody waits: the "bound 4" rows would be the rows above."""
    return concurrency == 1 and name.startswith("bound 4")


def _generation(gate: ReplicaGate) -> Case:
    async def one(i: int) -> None:
        await gate.acquire()
        await asyncio.sleep(0)  # the generation: one turn of the loop
        gate.release()

    return one


async def measure(args: argparse.Namespace) -> Results:
    async with machine_service("0", "", "", "g.sock") as (service, directory):
        client = GateClient(str(directory / "g.sock"), 2)

        def gate(bound: int | None, machine: bool) -> Case:
            kw: dict[str, Any] = {"fixed": bound, "read_slots": None if bound else _no_slots,
                                  "margin": 0, "max_queue": 10**6, "queue_timeout": 60.0}
            return _generation(MachineGate(URL, client=client, **kw) if machine else ReplicaGate(URL, **kw))

        big = 10**6
        cases = {"no bound known, machine gate (no round trip)": gate(None, True),
                 "bounded, local gate (ReplicaGate)": gate(big, False),
                 "bounded, machine gate (service)": gate(big, True),
                 "bound 4 (most wait), local gate": gate(4, False),
                 "bound 4 (most wait), machine gate": gate(4, True)}
        try:
            await timed(cases["bounded, machine gate (service)"], 200, 1)  # connect, warm
            return await interleaved(cases, service, args, skip=_same_as_above)
        finally:
            await client.aclose()


if __name__ == "__main__":
    cli("benchmarks.machine_gate", measure, "generation")
