"""The overhead benchmark's answer checks (benchmarks/overhead/runner.py) for the APIs of typed
events, ``/v1/responses`` and ``/v1/messages``: a whole answer passes, streamed or not, cheap
or full; a wrong, cut or failed one is named.  (The quick runs of test_overhead_smoke.py check
Chat Completions answers only.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from benchmarks.overhead.runner import Runner

ANSWER = "Hello there"


def _runner() -> Runner:
    runner = object.__new__(Runner)  # only the answer is needed to check one
    runner.answer, runner.answer_json = ANSWER, orjson.dumps(ANSWER)
    return runner


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events)


def _responses(text: str) -> tuple[bytes, bytes]:
    half = len(text) // 2
    stream = _sse({"type": "response.created"},
                  {"type": "response.output_text.delta", "delta": text[:half]},
                  {"type": "response.output_text.delta", "delta": text[half:]},
                  {"type": "response.completed"})
    whole = orjson.dumps({"status": "completed", "output": [
        {"type": "reasoning"}, {"type": "message", "content": [{"text": text}]}]})
    return stream, whole


def _messages(text: str) -> tuple[bytes, bytes]:
    stream = _sse({"type": "message_start"},
                  {"type": "content_block_delta", "delta": {"type": "thinking_delta"}},
                  {"type": "content_block_delta", "delta": {"text": text}},
                  {"type": "message_stop"})
    whole = orjson.dumps({"stop_reason": "end_turn", "content": [
        {"type": "thinking"}, {"type": "text", "text": text}]})
    return stream, whole


@pytest.mark.parametrize("api, bodies, unended", [("responses", _responses, "not completed"),
                                                   ("messages", _messages, "not ended")])
@pytest.mark.parametrize("stream", [True, False])
def test_answers_pass_and_wrong_or_cut_ones_are_named(api: str, bodies: Any, unended: str,
                                                       stream: bool) -> None:
    runner = _runner()
    target: Any = SimpleNamespace(api=api, stream=stream, server="openai")
    right, wrong = (b[0 if stream else 1] for b in (bodies(ANSWER), bodies("Hello thar")))
    for full in (True, False):
        assert runner.check(target, 200, right, full) is None
        assert runner.check(target, 500, right, full) == f"HTTP 500: {right[:300]!r}"
    assert runner.check(target, 200, wrong, True) == f"content 'Hello thar' != {ANSWER!r}"
    if not stream:  # (a cheap check of a stream reads its end, not its text)
        assert runner.check(target, 200, wrong, False) is not None
    cut = right[:right.rindex(b"event: ")] if stream else right.replace(b'"completed"', b'"failed"')
    if api == "messages" and not stream:
        cut = right.replace(b"end_turn", b"max_tokens")
    assert (runner.check(target, 200, cut, False) or "").startswith(unended)
    if stream:
        assert (runner.check(target, 200, cut, True) or "").startswith(f"stream {unended}")
    garbled = b"data: {not json\n\n" if stream else b"{not json"
    assert (runner.check(target, 200, garbled, True) or "").startswith("unparsable answer")
