"""The non-streamed message is folded without building stream events (issue 37's cost): for
every event sequence it is the same message the streamed view amounts to, event by event
nothing is sent, and a server tool's call (its input sent once complete) folds the same way."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.messages.encode import MessagesEncoder
from app.api.messages.server_blocks import ServerBlocks
from app.core import events as ev
from app.core.output import Usage
from app.tools import code

USAGE = Usage(prompt_tokens=12, completion_tokens=30, cached_tokens=2)


def _seal(text: str) -> str:
    return f"sealed[{text}]"


def _encoder(stream: bool, show_thinking: bool = True, server: bool = False) -> MessagesEncoder:
    blocks = ServerBlocks({code.NAME: "code_execution"}, _seal) if server else None
    return MessagesEncoder("msg_f", "m", _seal, stream=stream, show_thinking=show_thinking, server=blocks)


def _both(events: list[ev.Event], **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """(streamed result, non-streamed result, what the non-streamed encoder sent per event)."""
    streamed, folded = _encoder(True, **kwargs), _encoder(False, **kwargs)
    sent = []
    for e in events:
        streamed.encode(e)
        sent.append(folded.encode(e))
    return streamed.result(), folded.result(), sent


CASES: dict[str, list[ev.Event]] = {
    "text": [ev.TextDelta("Hel"), ev.TextDelta(""), ev.TextDelta("lo"), ev.PartDone("text"),
             ev.Finished("stop", USAGE)],
    "thinking, preamble, text, tool_use": [
        ev.ReasoningDelta("let me "), ev.ReasoningDelta("think"), ev.PartDone("reasoning"),
        ev.PreambleDelta("Checking. "), ev.PartDone("preamble"), ev.TextDelta("Writing it."),
        ev.ToolCallStarted(0, "toolu_1", "Write"), ev.ToolCallArgumentsDelta(0, '{"path": '),
        ev.ToolCallArgumentsDelta(0, ""), ev.ToolCallArgumentsDelta(0, '"a.txt"}'),
        ev.ToolCallDone(0, "toolu_1", "Write", '{"path": "a.txt"}'),
        ev.ToolCallStarted(1, "toolu_2", "Read"), ev.ToolCallArgumentsDelta(1, '{"p'),
        ev.ToolCallDone(1, "toolu_2", "Read", '{"path": "b"}'),  # repaired: the final ones win
        ev.Finished("tool_calls", USAGE)],
    "blocks closed without PartDone": [
        ev.ReasoningDelta("a"), ev.TextDelta("b"), ev.ReasoningDelta("c"), ev.TextDelta("d"),
        ev.Finished("length", USAGE)],
    "a stop sequence": [ev.TextDelta("one two"), ev.Finished("stop", USAGE, stop_sequence="three")],
    "arguments for a call that is not open": [
        ev.ToolCallArgumentsDelta(0, '{"x": 1}'), ev.TextDelta("t"), ev.ToolCallArgumentsDelta(0, "{}"),
        ev.Finished("stop", USAGE)],
    "an error": [ev.TextDelta("partial"), ev.Error("upstream gone", code="upstream_error")],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("show_thinking", [True, False])
def test_the_fold_is_the_streamed_message(name: str, show_thinking: bool) -> None:
    streamed, folded, sent = _both(CASES[name], show_thinking=show_thinking)
    assert folded == streamed
    assert sent == [[] for _ in CASES[name]]


def test_the_fold_keeps_every_block_in_the_models_order() -> None:
    _, folded, _ = _both(CASES["thinking, preamble, text, tool_use"])
    assert folded["content"] == [
        {"type": "thinking", "thinking": "let me think", "signature": "sealed[let me think]"},
        {"type": "text", "text": "Checking. "},
        {"type": "text", "text": "Writing it."},
        {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {"path": "a.txt"}},
        {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "b"}}]
    assert folded["stop_reason"] == "tool_use"
    assert folded["usage"] == {"input_tokens": 10, "output_tokens": 30, "cache_read_input_tokens": 2,
                               "cache_creation_input_tokens": 0}


def test_omitted_thinking_still_seals_the_folded_text() -> None:
    _, folded, _ = _both([ev.ReasoningDelta("secret "), ev.ReasoningDelta("plan"), ev.TextDelta("ok"),
                          ev.Finished("stop", USAGE)], show_thinking=False)
    assert folded["content"][0] == {"type": "thinking", "thinking": "", "signature": "sealed[secret plan]"}


def test_a_server_tool_call_folds_its_input_and_result() -> None:
    events: list[ev.Event] = [
        ev.ToolCallStarted(0, "srvtoolu_1", code.NAME), ev.ToolCallArgumentsDelta(0, "print("),
        ev.ToolCallArgumentsDelta(0, ""), ev.ToolCallArgumentsDelta(0, "1)"),
        ev.ToolCallDone(0, "srvtoolu_1", code.NAME, "print(1)"),
        ev.HostedCallDone("srvtoolu_1", "1\n"), ev.TextDelta("It printed 1."), ev.Finished("stop", USAGE)]
    streamed, folded, sent = _both(events, server=True)
    assert folded == streamed
    assert sent == [[] for _ in events]
    assert [b["type"] for b in folded["content"]] == ["server_tool_use", "code_execution_tool_result", "text"]
    assert folded["content"][0]["input"] == {"code": "print(1)"}
    assert folded["content"][1]["content"]["stdout"] == "1\n"


def test_nothing_after_the_terminal_event() -> None:
    enc = _encoder(False)
    events: list[ev.Event] = [ev.TextDelta("a"), ev.Finished("stop", USAGE), ev.TextDelta("late")]
    for e in events:
        enc.encode(e)
    assert enc.result()["content"] == [{"type": "text", "text": "a"}]
