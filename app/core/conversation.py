"""A request in the internal model: the conversation, its tools, and generation parameters.

``app/api/*/ingest.py`` builds these from an API request; renderers read them.  Plain frozen
dataclasses, independent of any wire schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "developer", "user", "assistant", "tool"]
ReasoningEffort = Literal["low", "medium", "high"]
TemplateValue = bool | int | float | None


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image; from a request, ``url`` is a ``data:image/...;base64,`` URL that
    :func:`app.core.media.check_image_url` accepted (the gateway fetches no addresses)."""

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
    """``name`` is what every format shows the model; a member of a namespace tool (OpenAI
    Responses ``{"type": "namespace"}``) is named ``NAMESPACE__NAME`` and carries
    ``namespace``, so a format with namespaces of its own (Harmony) can show it in one."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    namespace: str | None = None
    # "browser" / "python": a gateway-run tool that stands for gpt-oss's built-in tool of that
    # name (Harmony shows the built-in in the system message; other formats a function);
    # "file_search": shown in the system message the same way, as a namespace of its functions
    builtin: str | None = None

    @property
    def recipient(self) -> str:
        """The tool as a Harmony recipient: ``functions.NAME``, ``NAMESPACE.NAME``, ``python``."""
        if self.builtin == "python":
            return "python"
        if self.namespace and self.name.startswith(self.namespace + "__"):
            return f"{self.namespace}.{self.name[len(self.namespace) + 2:]}"
        return f"functions.{self.name}"


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
    user: str | None = None  # the end user, for upstreams that track abuse per user (OpenAI-compatible)
    # requests with the same key go to the same upstream replica (its KV cache holds their prefix)
    affinity: str | None = None
    thinking: bool | None = None  # a thinking switch: off for reasoning_effort "none", on for any other
    # the client's chat_template_kwargs: variables for a Jinja chat template (checked at ingest:
    # names that are not the template's own inputs, values that render as no text of their own)
    template_kwargs: tuple[tuple[str, TemplateValue], ...] = ()
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias): the backend's vocabulary
