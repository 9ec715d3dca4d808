"""The closed union of semantic events produced by every parser.

Parsers turn backend chunks into these; encoders turn them into a wire protocol.
A non-streaming answer is the fold of the same events (:mod:`app.api.chat.fold`).
Exactly one terminal event (:class:`Finished` or :class:`Error`) ends every stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.core.output import TokenLogprob, Usage

# content_filter: the backend declined (app.core.output.Finish.refused)
FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
PartKind = Literal["reasoning", "preamble", "text"]


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Chain-of-thought text (Harmony ``analysis``); never user-visible content."""

    text: str


@dataclass(frozen=True, slots=True)
class PreambleDelta:
    """User-visible progress text (Harmony ``commentary`` without a recipient)."""

    text: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Final answer text; ``logprobs`` covers exactly the tokens behind ``text``."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class PartDone:
    """A reasoning / preamble / text segment ended (a Harmony message closed)."""

    kind: PartKind


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    index: int
    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    index: int
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallDone:
    index: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class HostedCallStarted:
    """A hosted-tool call the model did not write in this response: one the client approved
    (``approval`` is the id of the request it answered), run before the first step."""

    call_id: str
    name: str
    arguments: str
    approval: str | None = None


@dataclass(frozen=True, slots=True)
class HostedCallDone:
    """The gateway ran hosted call ``call_id`` (:mod:`app.engine.loop`); ``error`` is set when
    the tool failed, timed out or was not run, and ``output`` is then what the model is told."""

    call_id: str
    output: str
    error: str | None = None
    detail: Mapping[str, Any] | None = None  # the tool's own account of the call (search: its action)


@dataclass(frozen=True, slots=True)
class Finished:
    """The end; ``limit`` names the bound that ended an agentic loop early (``max_tool_calls``,
    ``max_rounds``, ``deadline``): the answer is incomplete for that reason.
    ``stop_sequence``: the client's stop string that ended the answer, when one did."""

    reason: FinishReason
    usage: Usage
    limit: str | None = None
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class Error:
    """Terminal failure; ``code`` is a stable machine-readable string.  No HTTP status:
    :func:`app.core.errors.from_event` derives it where an answer is not yet committed."""

    message: str
    code: str
    type: str = "server_error"
    param: str | None = None


Event = (
    ReasoningDelta
    | PreambleDelta
    | TextDelta
    | PartDone
    | ToolCallStarted
    | ToolCallArgumentsDelta
    | ToolCallDone
    | HostedCallStarted
    | HostedCallDone
    | Finished
    | Error
)
TERMINAL = (Finished, Error)
