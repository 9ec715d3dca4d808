"""What the pre-encoded SSE streams' tests share (Chat Completions, Responses, Messages:
``tests/unit/api/{chat,responses,messages}/test_wire.py``): an encoder driven over events and
framed as the SSE sender frames a run's payloads, the generic stream against the pre-encoded one
byte for byte, hostile text, the lone surrogate both refuse, and hypothesis' events.

Each test module has a ``frames(events, *, pre, takes=..., **options)`` function
(:data:`Frames`): its encoder built with ``wire=pre`` and driven by :func:`drive` with its API's
framing.  ``takes`` says when the sender takes what is queued: after every event (:data:`EVERY`,
a sender that keeps up: one payload a delta), never before the end (``()``, one that lags: an
item's deltas join one payload), or at any chosen events (hypothesis).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Any, Protocol

import pytest
from hypothesis import strategies as st

from app.core import events as ev
from app.core.output import Usage

Json = dict[str, Any]
Framed = tuple[list[bytes], Json, list[Any]]  # the frames, the encoder's result, its payloads
Frames = Callable[..., Framed]

# text that must stay inside its JSON string: quotes, backslashes, control characters, line
# breaks (SSE's own separators), U+2028/9, non-ASCII, JSON punctuation; each API adds an SSE
# injection of its own framing
HOSTILE = ['"', "\\", '\\"', "\x00", "\x01\x1f", "\x7f", "\n\n", "\r\n", "\u2028", "\u2029", "é",
           "日本語", "😀", "\ufeff", "\ufffd", "</script>", "{}", "\t", "\U0010ffff", "a" * 300]


class StreamEncoder(Protocol):
    def start(self) -> list[Json]: ...

    def encode(self, event: ev.Event) -> list[Json]: ...

    def result(self) -> Json: ...


class _Every:
    def __contains__(self, position: object) -> bool:
        return True


EVERY: Container[int] = _Every()  # the sender takes each event's payloads before the next event


def drive(encoder: StreamEncoder, events: Iterable[ev.Event], framing: Callable[[Any], bytes],
          takes: Container[int] = EVERY) -> Framed:
    """The encoder's payloads for ``events`` (its start first), framed in order: those queued
    so far after each event whose position is in ``takes``, the rest at the end."""
    payloads = encoder.start()
    frames: list[bytes] = []
    for i, e in enumerate(events):
        payloads.extend(encoder.encode(e))
        if i in takes:
            frames += [framing(p) for p in payloads[len(frames):]]
    frames += [framing(p) for p in payloads[len(frames):]]
    return frames, encoder.result(), payloads


def sse_events(stream: bytes) -> list[bytes]:
    """An SSE stream's events (each ends with an empty line)."""
    assert stream.endswith(b"\n\n") or not stream
    return [event + b"\n\n" for event in stream.split(b"\n\n")[:-1]]


def same_bytes(frames: Frames, events: list[ev.Event], **options: Any) -> tuple[list[bytes], list[Any]]:
    """The pre-encoded stream's frames and payloads, once checked against the generic stream
    (its frames taken after every event): the same bytes, the same events, the same result."""
    generic, generic_result, _ = frames(events, pre=False, **options)
    pre, pre_result, payloads = frames(events, pre=True, **options)
    assert b"".join(pre) == b"".join(generic)
    assert sse_events(b"".join(pre)) == generic
    assert pre_result == generic_result
    return pre, payloads


def two_of_each(call_id: str, name: str, usage: Usage) -> list[ev.Event]:
    """Two reasoning deltas (their part closed), two text and two argument deltas of call
    ``call_id`` to ``name`` (JSON punctuation in them), the call's end and a tool-call finish."""
    return [ev.ReasoningDelta("th"), ev.ReasoningDelta("ink"), ev.PartDone("reasoning"),
            ev.TextDelta("a"), ev.TextDelta('"b"'), ev.ToolCallStarted(0, call_id, name),
            ev.ToolCallArgumentsDelta(0, '{"p": '), ev.ToolCallArgumentsDelta(0, '"x\\n"}'),
            ev.ToolCallDone(0, call_id, name, '{"p": "x\\n"}'), ev.Finished("tool_calls", usage)]


def lone_surrogate_refused(frames: Frames) -> None:
    """A lone surrogate (unreachable from a backend: orjson refuses one in the upstream JSON,
    the token decoder makes U+FFFD) is refused by both encodings alike."""
    events: list[ev.Event] = [ev.TextDelta("a"), ev.TextDelta("\ud800")]
    for pre in (False, True):
        with pytest.raises(TypeError):
            frames(events, pre=pre)


def texts(hostile: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(hostile), st.text(max_size=12))


def events(text: st.SearchStrategy[str], *more: st.SearchStrategy[ev.Event]) -> st.SearchStrategy[ev.Event]:
    """Any text, preamble or reasoning delta, the end of any part, and the API's ``more`` (its calls)."""
    return st.one_of(
        st.builds(ev.TextDelta, text), st.builds(ev.PreambleDelta, text), st.builds(ev.ReasoningDelta, text),
        st.sampled_from([ev.PartDone("text"), ev.PartDone("reasoning"), ev.PartDone("preamble")]), *more)
