"""The public suite's WebSocket-mode tests (``x-openresponses-websocket`` in the document).

A session sends ``response.create`` messages (:class:`WebSocketResponseCreateEvent`) one at a
time on one connection; each turn ends at its terminal event or at an ``error``
(:class:`WebSocketErrorEvent`).  Every request is validated before it is sent, every event
against its schema, every turn's events by the wire-order checker (sequence numbers may
continue across the turns of a session).  A server without WebSocket mode fails these tests
with the HTTP status it answered the upgrade with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.cli.conformance import spec
from app.cli.conformance.responses import Context, compact_request, completed, has_output, user
from app.cli.conformance.runner import Check, TestCase
from app.cli.conformance.transport import WebSocket, WebSocketUnavailable, websocket_url
from app.cli.conformance.wire import TERMINAL, check_stream

Json = dict[str, Any]
Step = Json | Callable[[list["Turn"]], Json]
NOT_FOUND = "previous_response_not_found"


@dataclass
class Turn:
    request: Json
    events: list[Json] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    final: Json | None = None
    error_event: Json | None = None

    @property
    def error_code(self) -> str | None:
        for source in (self.error_event, self.final):
            error = (source or {}).get("error")
            if isinstance(error, dict) and isinstance(error.get("code"), str):
                return str(error["code"])
        return None

    @property
    def failed(self) -> bool:
        return self.error_event is not None or self.error_code is not None or \
            (self.final or {}).get("status") == "failed"


def session(ctx: Context, check: Check, steps: list[Step], *, validate_requests: bool = True,
            label: str = "") -> list[Turn] | None:
    """Run ``steps`` on one connection; None (and a suite failure) without WebSocket mode."""
    try:
        ws = WebSocket(websocket_url(ctx.client.base_url), ctx.client.api_key, ctx.client.timeout)
    except WebSocketUnavailable as exc:
        check.fail(str(exc))
        return None
    turns: list[Turn] = []
    try:
        for n, step in enumerate(steps, 1):
            request = step(turns) if callable(step) else step
            if validate_requests and spec.available():
                bad = spec.validate("WebSocketResponseCreateEvent", request)
                if bad:  # the test's own request: a runner bug, never the server's fault
                    raise ValueError(f"request {n} is not a WebSocketResponseCreateEvent: {bad}")
            turn = Turn(request)
            turns.append(turn)
            ws.send(request)
            _read_turn(ws, turn, ctx.client.timeout)
            tag = f"{label}turn {n}: "
            check.suite += [tag + p for p in turn.problems]
            check.events(turn.events, tag)
            if turn.error_event is not None:
                check.schema("WebSocketErrorEvent", turn.error_event, tag)
            if turn.events and turn.events[0].get("type") == "response.created":
                check.wire(check_stream(turn.events, start=None), tag)
            if turn.final is not None:
                check.schema("ResponseResource", turn.final, tag + "final response: ")
            if turn.final is None and turn.error_event is None:
                break
    finally:
        ws.close()
    return turns


def _read_turn(ws: WebSocket, turn: Turn, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ws.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            message = ws.recv()
        except TimeoutError:
            turn.problems.append("Timed out waiting for terminal WebSocket response event")
            return
        except ConnectionError:
            message = None
        if message is None:
            turn.problems.append("WebSocket closed before a terminal response event")
            return
        if message == "[DONE]":
            turn.problems.append("Received [DONE] before a terminal WebSocket event")
            return
        try:
            event = json.loads(message)
        except ValueError:
            turn.problems.append(f"Failed to parse WebSocket event data: {message[:80]}")
            continue
        if not isinstance(event, dict):
            turn.problems.append(f"WebSocket message is not an object: {message[:80]}")
            continue
        if event.get("type") == "error" and "sequence_number" not in event:
            turn.error_event = event  # a WebSocketErrorEvent: the turn ends
            return
        turn.events.append(event)
        if event.get("type") in TERMINAL:
            turn.final = event.get("response") if isinstance(event.get("response"), dict) else None
            return
        if event.get("type") == "error":
            turn.error_event = event
            return


def _check_final(check: Check, turn: Turn | None, tag: str = "") -> None:
    if turn is None or turn.final is None:
        check.fail(f"{tag}no terminal response")
        return
    for problem in ([] if turn.final.get("output") else ["Response has no output items"]):
        check.fail(tag + problem)
    completed(check, turn.final)


def _single(ctx: Context, check: Check) -> None:
    turns = session(ctx, check, [{"type": "response.create", "model": ctx.model,
                                  "input": [user("Count from 1 to 3.")]}])
    if turns is not None:
        _check_final(check, turns[0])
        if turns[0].final:
            has_output(check, turns[0].final)


def _sequential(ctx: Context, check: Check) -> None:
    steps: list[Step] = [{"type": "response.create", "model": ctx.model, "store": False,
                          "input": f"Reply with exactly: {word}"} for word in ("first", "second")]
    turns = session(ctx, check, steps)
    if turns is not None:
        for n in range(2):
            _check_final(check, turns[n] if n < len(turns) else None, f"turn {n + 1}: ")


def _first_id(turns: list[Turn]) -> str:
    rid = (turns[0].final or {}).get("id") if turns else None
    if not rid:
        raise ValueError("First WebSocket turn did not return a response id")
    return str(rid)


def _continuation(ctx: Context, check: Check) -> None:
    turns = session(ctx, check, [
        {"type": "response.create", "model": ctx.model, "store": False,
         "input": "Remember the code word: cobalt. Reply with OK."},
        lambda t: {"type": "response.create", "model": ctx.model, "store": False,
                   "previous_response_id": _first_id(t),
                   "input": "What is the code word? Reply with only the code word."}])
    if turns is not None:
        _check_final(check, turns[1] if len(turns) > 1 else None, "turn 2: ")


def _reconnect(ctx: Context, check: Check) -> None:
    first = session(ctx, check, [{"type": "response.create", "model": ctx.model, "store": False,
                                  "input": "Remember the code word: copper. Reply with OK."}])
    if first is None:
        return
    rid = _first_id(first)
    turns = session(ctx, check, [
        {"type": "response.create", "model": ctx.model, "store": False, "previous_response_id": rid,
         "input": "Try to continue after reconnect. Reply with exactly: reconnected"},
        {"type": "response.create", "model": ctx.model, "store": False, "input": [user(
            "The previous store:false chain could not continue after reconnect. "
            "Start a new response and reply with exactly: recovered")]}], label="reconnect ")
    if turns is None:
        return
    check.expect(turns[0].error_code == NOT_FOUND, f"Expected {NOT_FOUND} after reconnecting a store:false "
                                                   f"chain but got {turns[0].error_code or 'no error code'}")
    _check_final(check, turns[1] if len(turns) > 1 else None, "recovery: ")


def _not_found(ctx: Context, check: Check) -> None:
    turns = session(ctx, check, [{"type": "response.create", "model": ctx.model, "store": False,
                                  "previous_response_id": f"resp_openresponses_missing_{int(time.time())}",
                                  "input": "This should fail because the previous response is missing."}])
    if turns is not None:
        code = turns[0].error_code
        check.expect(code == NOT_FOUND, f"Expected {NOT_FOUND} but got {code or 'no error code'}")


def _evicts(ctx: Context, check: Check) -> None:
    turns = session(ctx, check, [
        {"type": "response.create", "model": ctx.model, "store": False,
         "input": "Remember the code word: ember. Reply with OK."},
        lambda t: {"type": "response.create", "model": ctx.model, "store": False,
                   "previous_response_id": _first_id(t),
                   "input": [{"type": "function_call_output", "call_id": "call_openresponses_missing",
                              "output": "No matching tool call exists in the previous response."}]},
        lambda t: {"type": "response.create", "model": ctx.model, "store": False,
                   "previous_response_id": _first_id(t),
                   "input": "Try to continue after the failed turn. Reply with exactly: stale"}])
    if turns is None:
        return
    check.expect(len(turns) > 1 and turns[1].failed,
                 "Expected the second WebSocket continuation turn to fail")
    code = turns[2].error_code if len(turns) > 2 else None
    check.expect(code == NOT_FOUND, f"Expected {NOT_FOUND} after failed continuation eviction but got "
                                    f"{code or 'no error code'}")


def _compact_chain(ctx: Context, check: Check) -> None:
    ex = ctx.client.post("/responses/compact", compact_request(ctx.model))
    if not check.expect(ex.status == 200, f"HTTP {ex.status} from /responses/compact: {ex.text[:160]}"):
        return
    check.schema("CompactResource", ex.body, "compact: ")
    output = ex.body.get("output") if isinstance(ex.body, dict) else None
    if not check.expect(isinstance(output, list), "Compaction response did not include an output array"):
        return
    assert isinstance(output, list)
    follow = user("Continue from here. Reply with exactly: compacted")
    turns = session(ctx, check, [{"type": "response.create", "model": ctx.model, "store": False, "tools": [],
                                  "input": [*output, follow]}], validate_requests=False)
    if turns is not None:
        _check_final(check, turns[0])


def cases() -> list[TestCase]:
    r = "responses"
    return [
        TestCase("websocket-response", r, "WebSocket Response", _single),
        TestCase("websocket-sequential-responses", r, "WebSocket Sequential Responses", _sequential),
        TestCase("websocket-continuation", r, "WebSocket Continuation", _continuation),
        TestCase("websocket-reconnect-store-false-recovery", r, "WebSocket Store False Reconnect Recovery",
                 _reconnect),
        TestCase("websocket-previous-response-not-found", r, "WebSocket Missing Previous Response",
                 _not_found),
        TestCase("websocket-failed-continuation-evicts-cache", r,
                 "WebSocket Failed Continuation Evicts Cache", _evicts),
        TestCase("websocket-compact-new-chain", r, "WebSocket Compact New Chain", _compact_chain),
    ]
