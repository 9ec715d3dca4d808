"""What per-key limits cost a request with ``--workers N`` and no Redis (the machine's counter
service, app/http/machine_counters.py) against one process counting alone (``LocalCounters``).

``python -m benchmarks.machine_counters [--n 5000] [--rounds 3] [--concurrency 32]
[--tree LABEL=PATH ...]``: one generation's admission and release (the two calls the limits
middleware makes) ``--n`` times, one at a time and ``--concurrency`` at a time, for: a key
without limits (not counted: the path every request takes without auth or limits), a limited
key counted in this process, and a limited key counted by a real service process (one
connection, as one worker has).  Rounds are interleaved.  Reports µs per request (wall) and CPU
µs per request (this process + the service's, read from /proc); with ``--tree``, each tree's and
their ratios (:mod:`benchmarks.machine_harness`).  Markdown to stdout; ``--json FILE``.
"""

from __future__ import annotations

import argparse
import functools

from app.http.counters import Budget, Counters, LocalCounters
from app.http.machine_counters import MachineCounters
from benchmarks.machine_harness import Case, Results, cli, interleaved, machine_service, timed

LIMITED = Budget(rpm=10**9, tpm=10**12, concurrent=10**6)
FREE = Budget(None, None, None)


async def _one(counters: Counters, budget: Budget, i: int) -> None:
    lease = f"l{i}"
    refused = await counters.admit("key:bench", budget, generation=True, lease=lease)
    assert refused is None
    counters.release("key:bench", lease, 80)


async def measure(args: argparse.Namespace) -> Results:
    async with machine_service() as (service, directory):
        shared = MachineCounters(str(directory / "c.sock"), timeout=5.0)  # a loaded machine
        await timed(functools.partial(_one, shared, LIMITED), 200, 1)  # connect, warm
        cases: dict[str, Case] = {
            "no limits (not counted)": functools.partial(_one, LocalCounters(), FREE),
            "limited, this process (LocalCounters)": functools.partial(_one, LocalCounters(), LIMITED),
            "limited, machine service (MachineCounters)": functools.partial(_one, shared, LIMITED)}
        try:
            return await interleaved(cases, service, args)
        finally:
            await shared.aclose()


if __name__ == "__main__":
    cli("benchmarks.machine_counters", measure, "request")
