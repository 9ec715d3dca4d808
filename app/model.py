"""The gateway's internal model: what every layer between ingest and encode speaks.

These are plain frozen dataclasses, deliberately independent of any wire schema:
``app/ingest`` builds a :class:`Conversation` and :class:`GenerationParams` from an
API request, ``app/render`` turns them into a :class:`Prompt`, adapters turn a
prompt into :class:`Chunk` objects, and ``app/parse`` turns chunks into
:mod:`app.events`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "developer", "user", "assistant", "tool"]
ReasoningEffort = Literal["low", "medium", "high"]


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    url: str
    detail: str | None = None
    type: Literal["image"] = "image"


ContentPart = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call made by the assistant; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: tuple[ContentPart, ...] = ()
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None
    source: str | None = None  # where the request holds it ("messages[2]", "input[0]"), for errors

    @property
    def text(self) -> str:
        """The message's text parts joined (non-text parts are ignored)."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


def part_param(message: Message, index: int, part: int) -> str:
    """The request parameter of content part ``part`` of the ``index``-th message."""
    return f"{message.source or f'messages[{index}]'}.content[{part}]"


@dataclass(frozen=True, slots=True)
class FunctionTool:
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """A JSON-schema response format (``response_format`` / ``text.format``)."""

    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """``mode`` auto / none / required; ``allowed`` restricts callable tool names."""

    mode: Literal["auto", "none", "required"] = "auto"
    allowed: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    messages: tuple[Message, ...]
    tools: tuple[FunctionTool, ...] = ()
    response_format: ResponseFormat | None = None


@dataclass(frozen=True, slots=True)
class GenerationParams:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    n: int = 1
    reasoning_effort: ReasoningEffort | None = None
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    ignore_eos: bool = False  # keep generating past the model's end (benchmarks); the answer still ends there


@dataclass(frozen=True, slots=True)
class Prompt:
    """What an adapter sends upstream.

    ``token_ids`` is authoritative when present (it is what makes user text unable to
    become a control token); ``text`` is for text-only transports.  ``prefill_ids``
    are the tail of ``token_ids`` that the renderer added to steer the assistant
    message (e.g. a forced tool-call header); the parser consumes them first.
    ``stop_token_ids`` end generation; ``stop_strings`` are handed to the backend.

    ``segments`` is a text prompt split into (text, trusted) pieces: trusted pieces are
    the template's own text and may contain control tokens; untrusted pieces are the
    client's text and must be tokenized with special-token parsing off.  A backend
    with a tokenizer turns them into ``token_ids`` before sending.  ``conversation`` is
    set for chat-mode backends that take messages instead of a prompt (Ollama
    ``/api/chat``, OpenAI-compatible upstreams).  ``prefill_text`` is the text form of
    a forced start of the assistant message, fed to text-level parsers first.
    ``tools`` are the offered tools, for parsers that type call arguments by their
    schema.  ``json_schema`` asks the backend to constrain the whole output to the schema
    (grammar / structured outputs); formats set it only when the model's output has no
    reasoning or markers around the answer (Harmony writes the schema into the prompt).
    """

    token_ids: tuple[int, ...] | None
    text: str | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    prefill_ids: tuple[int, ...] = ()
    segments: tuple[tuple[str, bool], ...] = ()
    conversation: Conversation | None = None
    prefill_text: str = ""
    json_schema: dict[str, Any] | None = None
    tools: tuple[FunctionTool, ...] = ()


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    token_id: int | None = None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    token_id: int | None = None
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


StopKind = Literal["eos", "length", "stop_string", "tool_calls"]


@dataclass(frozen=True, slots=True)
class Finish:
    """How the backend ended generation (before any format-level interpretation)."""

    kind: StopKind
    stop_string: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """A structured tool-call delta from a chat-mode backend (OpenAI / Ollama shape).

    The first delta of a call carries ``name`` (and ``id`` when the backend gives one);
    later deltas with the same ``index`` carry argument fragments.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of backend output: text, the token ids behind it, and metadata.

    Prompt-mode backends fill ``text`` / ``token_ids`` with raw model output (control
    tokens included where the backend returns them).  Chat-mode backends have already
    separated the output: ``text`` is answer content, ``reasoning`` is chain of thought
    and ``tool_calls`` are structured calls.
    """

    text: str = ""
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] | None = None
    finish: Finish | None = None
    usage: Usage | None = None
    reasoning: str = ""
    tool_calls: tuple[ToolCallChunk, ...] = ()
