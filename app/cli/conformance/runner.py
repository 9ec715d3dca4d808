"""Results: three verdicts per test (suite, schema, wire), the table, the JSON, the exit status.

A :class:`Check` collects what one test finds.  ``suite`` is the test's own assertions (the
public suite's, or the Chat Completions section's); ``schema`` is strict validation of every
body and event (Open Responses: the spec document; Chat Completions: the OpenAI SDK's typed
models); ``wire`` is event order (:mod:`app.cli.conformance.wire`, or the chunk rules of
:mod:`app.cli.conformance.chat`).  A verdict is ``pass``, ``fail``, ``skip`` (the runner
could not check: jsonschema missing) or ``-`` (nothing to check).  A test passes when no
verdict failed; it is *skipped* only when the runner cannot run it at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.cli.conformance import spec

Json = dict[str, Any]


class Check:
    """What one test found; tests call :meth:`fail`, :meth:`schema`, :meth:`events`, :meth:`wire`."""

    def __init__(self) -> None:
        self.suite: list[str] = []
        self.schema_problems: list[str] = []
        self.schema_checked = False
        self.schema_skipped = False
        self.wire_problems: list[str] = []
        self.wire_checked = False
        self.event_count = 0
        self.skip_reason: str | None = None

    def fail(self, message: str) -> None:
        self.suite.append(message)

    def expect(self, condition: bool, message: str) -> bool:
        if not condition:
            self.suite.append(message)
        return condition

    def schema(self, name: str, instance: Any, label: str = "") -> None:
        if not spec.available():
            self.schema_skipped = True
            return
        self.schema_checked = True
        self.schema_problems += [f"{label}{p}" for p in spec.validate(name, instance)]

    def typed(self, problems: list[str]) -> None:
        """Schema problems found some other way (the OpenAI SDK's typed models)."""
        self.schema_checked = True
        self.schema_problems += problems

    def events(self, events: list[Json], label: str = "") -> None:
        self.event_count += len(events)
        if not spec.available():
            self.schema_skipped = self.schema_skipped or bool(events)
            return
        self.schema_checked = self.schema_checked or bool(events)
        for e in events:
            self.schema_problems += [f"{label}{p}" for p in spec.validate_event(e)]

    def wire(self, problems: list[str], label: str = "") -> None:
        self.wire_checked = True
        self.wire_problems += [f"{label}{p}" for p in problems]


def _verdict(checked: bool, problems: list[str], skipped: bool = False) -> str:
    if problems:
        return "fail"
    if checked:
        return "pass"
    return "skip" if skipped else "-"


@dataclass
class Result:
    id: str
    section: str
    name: str
    status: str  # passed | failed | skipped
    suite: str
    schema: str
    wire: str
    seconds: float
    events: int
    reasons: list[str] = field(default_factory=list)

    def as_json(self) -> Json:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TestCase:
    id: str
    section: str  # "responses" | "chat"
    name: str
    run: Callable[[Any, Check], None]  # (context, check)
    origin: str = "suite"  # "suite": the public Open Responses suite; "extra": this runner's own


def run_case(case: TestCase, ctx: Any) -> Result:
    check = Check()
    started = time.monotonic()
    try:
        case.run(ctx, check)
    except Exception as exc:  # a transport error or a body the test could not read
        check.fail(f"{type(exc).__name__}: {exc}"[:300])
    seconds = time.monotonic() - started
    verdicts = (_verdict(bool(check.suite) or not check.skip_reason, check.suite),
                _verdict(check.schema_checked, check.schema_problems, check.schema_skipped),
                _verdict(check.wire_checked, check.wire_problems))
    if check.skip_reason and not check.suite:
        status, reasons = "skipped", [check.skip_reason]
    else:
        status = "failed" if "fail" in verdicts else "passed"
        reasons = [*check.suite, *check.schema_problems[:5], *check.wire_problems[:5]]
    return Result(case.id, case.section, case.name, status, *verdicts, round(seconds, 3),
                  check.event_count, reasons)


def table(results: list[Result], width: int = 100) -> str:
    head = f"{'test':<44} {'suite':<5} {'schema':<6} {'wire':<5} {'time':>6}  reason"
    lines = [head, "-" * len(head)]
    for r in results:
        reason = "; ".join(r.reasons)
        reason = reason if len(reason) <= width else reason[: width - 3] + "..."
        mark = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}[r.status]
        lines.append(f"{mark} {r.section + '/' + r.id:<39} {r.suite:<5} {r.schema:<6} {r.wire:<5} "
                     f"{r.seconds:>5.2f}s  {reason}")
    return "\n".join(lines)


def summary(results: list[Result]) -> Json:
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    return {**counts, "total": len(results), "events": sum(r.events for r in results)}


def to_json(results: list[Result], meta: Json) -> str:
    return json.dumps({**meta, "summary": summary(results), "results": [r.as_json() for r in results]},
                      indent=2)


def exit_status(results: list[Result]) -> int:
    """0 only when every test that ran passed (and at least one ran)."""
    ran = [r for r in results if r.status != "skipped"]
    return 0 if ran and all(r.status == "passed" for r in ran) else 1
