"""Fake chat-mode upstreams: Ollama ``/api/chat`` (NDJSON) and OpenAI-compatible SSE.

* :class:`Recorded` replays one stored exchange (``tests/fixtures/ollama`` or the wire
  recordings) byte for byte through ``httpx.MockTransport``.
* :class:`Script` is one assistant turn (reasoning / answer / tool-call steps, a finish
  and token counts) that :func:`ollama_lines` and :func:`openai_events` turn into each
  server's wire shape (copied from the fixtures and the recordings in
  ``tests/fixtures/wire/*/07*``), so the same turn can go through both adapters.
* :class:`EndlessChatUpstream` is a real loopback server that streams one piece every
  ``interval`` forever in either dialect and records when its connection closed.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.wire import WIRE, RecordedBody, Recorder, recorded_response

OLLAMA = Path(__file__).resolve().parent.parent / "fixtures" / "ollama"


def load(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


class _Fake(Recorder, ABC):
    """Records what the adapter sent (:class:`tests.support.wire.Recorder`); counts closes."""

    @abstractmethod
    def __call__(self, request: httpx.Request) -> httpx.Response: ...


class Recorded(_Fake):
    """Answers every request with one stored exchange (``ollama`` fixture or wire name)."""

    def __init__(self, name: str, server: str = "ollama") -> None:
        super().__init__()
        self.record = load(OLLAMA / f"{name}.json" if server == "ollama"
                           else WIRE / server / f"{name}.json")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        return recorded_response(self.record, self._closed)


@dataclass
class Script:
    """One assistant turn.  ``steps``: ``("reasoning", text)``, ``("text", text)`` or
    ``("call", call_id, name, arguments_json)``; ``finish`` is the upstream's reason."""

    steps: list[tuple[str, ...]]
    finish: str = "stop"
    prompt_tokens: int = 12
    completion_tokens: int = 9
    model: str = "qwen3"
    calls: list[tuple[str, str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.calls = [(s[1], s[2], s[3]) for s in self.steps if s[0] == "call"]


def ollama_lines(script: Script) -> list[bytes]:
    """The turn as ``/api/chat`` NDJSON lines (shape of ``tests/fixtures/ollama``)."""
    def line(message: dict[str, Any], **extra: Any) -> bytes:
        event = {"model": script.model, "created_at": "2025-11-02T10:00:00.000001Z",
                 "message": {"role": "assistant", "content": "", **message}, **extra}
        return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"

    out: list[bytes] = []
    n_call = 0
    for step in script.steps:
        if step[0] == "reasoning":
            out.append(line({"thinking": step[1]}, done=False))
        elif step[0] == "text":
            out.append(line({"content": step[1]}, done=False))
        else:
            out.append(line({"tool_calls": [{"id": step[1], "function": {
                "index": n_call, "name": step[2], "arguments": json.loads(step[3])}}]}, done=False))
            n_call += 1
    out.append(line({}, done_reason=script.finish, done=True, total_duration=1000,
                    prompt_eval_count=script.prompt_tokens, eval_count=script.completion_tokens))
    return out


def openai_events(script: Script) -> list[bytes]:
    """The turn as Chat Completions SSE chunks (shape of vLLM's ``07c`` recording)."""
    def event(delta: dict[str, Any] | None, finish: str | None = None,
              usage: dict[str, int] | None = None) -> bytes:
        body: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                                "created": 1795345133, "model": script.model, "choices": []}
        if delta is not None:
            body["choices"] = [{"index": 0, "delta": delta, "logprobs": None,
                                "finish_reason": finish}]
        if usage is not None:
            body["usage"] = usage
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    out = [event({"role": "assistant", "content": ""})]
    n_call = 0
    for step in script.steps:
        if step[0] == "reasoning":
            out.append(event({"reasoning_content": step[1]}))
        elif step[0] == "text":
            out.append(event({"content": step[1]}))
        else:
            half = len(step[3]) // 2
            out.append(event({"tool_calls": [{"index": n_call, "id": step[1], "type": "function",
                                              "function": {"name": step[2],
                                                           "arguments": step[3][:half]}}]}))
            out.append(event({"tool_calls": [{"index": n_call,
                                              "function": {"arguments": step[3][half:]}}]}))
            n_call += 1
    finish = "tool_calls" if script.calls and script.finish == "stop" else script.finish
    out.append(event({}, finish))
    out.append(event(None, usage={
        "prompt_tokens": script.prompt_tokens, "completion_tokens": script.completion_tokens,
        "total_tokens": script.prompt_tokens + script.completion_tokens}))
    out.append(b"data: [DONE]\n\n")
    return out


class FakeChat(_Fake):
    """Streams a :class:`Script` in the ``ollama`` or ``openai`` dialect."""

    def __init__(self, script: Script, dialect: str) -> None:
        super().__init__()
        self.dialect = dialect
        self.body = ollama_lines(script) if dialect == "ollama" else openai_events(script)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        ctype = "application/x-ndjson" if self.dialect == "ollama" else "text/event-stream"
        return httpx.Response(200, headers={"content-type": ctype},
                              stream=RecordedBody(list(self.body), self._closed))
