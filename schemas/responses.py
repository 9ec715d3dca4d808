"""Wire models of the Open Responses create body (OpenAPI 2026-04-24, ``CreateResponseBody``).

Input items are validated here and kept in wire form (dicts) by the gateway: the
response store holds them as sent, and ``app/ingest/responses.py`` turns them into
the internal Conversation.  Responses and streaming events are built as plain
dicts by ``app/encode/responses.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "stream": "yes" is not a bool


class InputText(_Wire):
    type: Literal["input_text"]
    text: str


class OutputText(_Wire):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] = []


class Refusal(_Wire):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Wire):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputFile(_Wire):
    type: Literal["input_file"]
    filename: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None


InputPart = Annotated[InputText | InputImage | InputFile, Field(discriminator="type")]
AssistantPart = Annotated[OutputText | Refusal, Field(discriminator="type")]


class UserMessage(_Wire):
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "system", "developer"]
    content: str | list[InputPart]
    status: str | None = None


class AssistantMessage(_Wire):
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["assistant"]
    content: str | list[AssistantPart]
    phase: Literal["commentary", "final_answer"] | None = None
    status: str | None = None


class FunctionCallItem(_Wire):
    type: Literal["function_call"]
    id: str | None = None
    call_id: str  # checked at ingest, as on every API
    name: str  # checked at ingest, as on every API (app/ingest/validate.py)
    arguments: str
    status: str | None = None


class FunctionCallOutputItem(_Wire):
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str  # checked at ingest, as on every API
    output: str | list[InputPart]
    status: str | None = None


class SummaryText(_Wire):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Wire):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Wire):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class CompactionItem(_Wire):
    """What ``POST /v1/responses/compact`` returns in place of the transcript it compacted."""

    type: Literal["compaction"]
    id: str | None = None
    encrypted_content: str = Field(max_length=10_485_760)
    created_by: str | None = None


class ItemReference(_Wire):
    type: Literal["item_reference"]
    id: str


def _item_kind(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type", "message")
        if kind == "message" or (kind is None and "role" in value):
            return "assistant" if value.get("role") == "assistant" else "message"
        return str(kind)
    kind = getattr(value, "type", "message")
    return "assistant" if kind == "message" and getattr(value, "role", "") == "assistant" else str(kind)


InputItem = Annotated[
    Annotated[UserMessage, Tag("message")]
    | Annotated[AssistantMessage, Tag("assistant")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[CompactionItem, Tag("compaction")]
    | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_item_kind),
]


class FunctionToolParam(_Wire):
    type: Literal["function"] = "function"
    name: str  # checked at ingest, as on every API (app/ingest/validate.py)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class SpecificFunction(_Wire):
    type: Literal["function"]
    name: str


class AllowedTools(_Wire):
    type: Literal["allowed_tools"]
    tools: list[SpecificFunction] = Field(min_length=1, max_length=128)
    mode: Literal["none", "auto", "required"] = "auto"


ToolChoiceParam = Annotated[SpecificFunction | AllowedTools, Field(discriminator="type")]


class TextFormatText(_Wire):
    type: Literal["text"]


class TextFormatJSONObject(_Wire):
    type: Literal["json_object"]


class TextFormatJSONSchema(_Wire):
    type: Literal["json_schema"]
    name: str  # checked at ingest, as on every API (app/ingest/validate.py)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextParam(_Wire):
    format: Annotated[TextFormatText | TextFormatJSONObject | TextFormatJSONSchema,
                      Field(discriminator="type")] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningParam(_Wire):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["concise", "detailed", "auto"] | None = None


class StreamOptions(_Wire):
    include_obfuscation: bool | None = None


class ConversationParam(_Wire):
    """``conversation`` in its object form: ``{"id": "conv_..."}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str


class CreateResponseBody(_Wire):
    # A field this gateway does not implement (``prompt``, ...) is refused
    # by name, never silently ignored.
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationParam | None = None  # app/api/conversations
    tools: list[FunctionToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=16)
    max_tool_calls: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    store: bool = True
    background: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    service_tier: Literal["auto", "default", "flex", "priority"] = "auto"
    include: list[str] | None = None
    safety_identifier: str | None = Field(default=None, max_length=64)
    prompt_cache_key: str | None = Field(default=None, max_length=64)
    user: str | None = None


class InputTokensBody(_Wire):
    """``POST /v1/responses/input_tokens``: the prompt-shaping fields of a create body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None  # the SDK may omit it: then [default_model]
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationParam | None = None
    tools: list[FunctionToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    truncation: Literal["auto", "disabled"] = "disabled"


class CompactBody(_Wire):
    """``POST /v1/responses/compact`` (``CompactResponseMethodPublicBody``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str | list[InputItem] | None = Field(default=None)
    instructions: str | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = Field(default=None, max_length=64)
