"""The generation fuzzer of ``tests/unit/http/test_fuzz_generation.py`` for a given time.

``python -m benchmarks.fuzz_generation --seconds 300`` runs the state machine in rounds of
random (not derandomized) examples against the hostile upstream until the time is up, each
failure reported with its steps and the ``@reproduce_failure`` blob (no shrinking: a round's
time goes to new cases), then prints how many generation requests reached the upstream, per
route, and every error status seen with one message each. ``--races`` adds the racing rules of
``tests/unit/http/test_fuzz_races.py``; ``--hosted`` runs the hosted-tool machine of
``tests/unit/http/test_fuzz_hosted.py`` instead (against a real MCP server that logs its calls)
and prints what it reached against that test's floors.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.support.mcp_server import CallLog, running
from tests.unit.http import test_fuzz_hosted as hosted
from tests.unit.http.test_fuzz_generation import STATS, GenerationMachine
from tests.unit.http.test_fuzz_races import RaceMachine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--examples", type=int, default=50, help="examples per round")
    parser.add_argument("--steps", type=int, default=20, help="steps per example")
    parser.add_argument("--races", action="store_true", help="with the racing requests too")
    parser.add_argument("--hosted", action="store_true", help="the hosted-tool machine instead")
    args = parser.parse_args()
    machine: type = RaceMachine if args.races else GenerationMachine
    with contextlib.ExitStack() as stack:
        if args.hosted:
            machine = hosted.HostedMachine
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url = stack.enter_context(running("streamable", call_log=folder / "calls.jsonl"))
            hosted.prepare(f"{url}/mcp", CallLog(folder / "calls.jsonl"), folder)
        run_rounds(machine, args)
    if args.hosted:
        print(dict(sorted(hosted.SEEN.items())))
        print(f"below the test's floors (seen, floor): {hosted.short_of_floors()}")
    else:
        print(STATS.summary())


def run_rounds(machine: type, args: argparse.Namespace) -> None:
    """Rounds of random examples until the time is up, each failure printed."""
    deadline = time.monotonic() + args.seconds
    rounds = failures = 0
    while time.monotonic() < deadline:
        rounds += 1
        try:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=args.examples,
                    stateful_step_count=args.steps,
                    database=None,
                    deadline=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                    print_blob=True,
                ),
            )
        except Exception:
            failures += 1
            text = traceback.format_exc()
            print(f"--- failure in round {rounds} ---\n{text[:4000]}\n...\n{text[-2500:]}", flush=True)
    print(f"\n{rounds} rounds of {args.examples} examples x {args.steps} steps, {failures} failing")


if __name__ == "__main__":
    main()
