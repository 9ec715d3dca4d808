"""Wire models of the OpenAI Chat Completions request body.

Only the request is modelled with pydantic: responses are built by
``app/encode`` as plain dicts and serialized with orjson, so no per-token model
round-trips happen on the hot path.  Unknown request fields are ignored (the
OpenAI SDK sends fields a gateway may not know yet); known fields are validated.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.base import NullMeansDefault


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "stream": "yes" is not a bool


class TextContentPart(_Wire):
    type: Literal["text"]
    text: str


class ImageURL(_Wire):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImageContentPart(_Wire):
    type: Literal["image_url"]
    image_url: ImageURL


class FileRef(_Wire):
    file_id: str | None = None  # a file of the Files API (/v1/files)
    file_data: str | None = None  # base64, or a data: URL
    filename: str | None = None


class FileContentPart(_Wire):
    type: Literal["file"]
    file: FileRef


UserContentPart = Annotated[TextContentPart | ImageContentPart | FileContentPart,
                            Field(discriminator="type")]


class SystemMessage(_Wire):
    role: Literal["system"]
    content: str | list[TextContentPart]
    name: str | None = None


class DeveloperMessage(_Wire):
    role: Literal["developer"]
    content: str | list[TextContentPart]
    name: str | None = None


class UserMessage(_Wire):
    role: Literal["user"]
    content: str | list[UserContentPart]
    name: str | None = None


class FunctionCall(_Wire):
    name: str
    arguments: str


class AssistantToolCall(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(_Wire):
    role: Literal["assistant"]
    content: str | list[TextContentPart] | None = None
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = None
    reasoning_content: str | None = None
    # Some clients (and vLLM) use ``reasoning`` for the same thing.
    reasoning: str | None = None
    refusal: str | None = None


class ToolMessage(_Wire):
    role: Literal["tool"]
    content: str | list[TextContentPart]
    tool_call_id: str


ChatMessage = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(_Wire):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Wire):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Wire):
    name: str


class NamedToolChoice(_Wire):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Wire):
    include_usage: bool = False


class JSONSchemaFormat(_Wire):
    name: str
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class ResponseFormatText(_Wire):
    type: Literal["text"]


class ResponseFormatJSONObject(_Wire):
    type: Literal["json_object"]


class ResponseFormatJSONSchema(_Wire):
    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


ResponseFormat = Annotated[
    ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema,
    Field(discriminator="type"),
]


class ChatCompletionRequest(NullMeansDefault, _Wire):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    ignore_eos: bool = False  # seed 003 / vLLM / llama.cpp: generate max_tokens whatever the model says
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=128)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    # vLLM's extension: variables for the model's chat template (e.g. {"enable_thinking": false});
    # checked at ingest (booleans, numbers and null only)
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    user: str | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    store: bool = False  # kept for GET /v1/chat/completions/{id} (app/api/chat/stored.py)
    # Accepted for compatibility; rejected by ingest when set to anything meaningful.
    logit_bias: dict[str, float] | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)


class LMIParameters(BaseModel):
    """SageMaker LMI's ``parameters`` (its standard ``inputs`` schema).  Unlike the chat body,
    an unknown name is refused (``extra="forbid"``): LMI servers take many backend-specific
    parameters, and one silently ignored would change the answer without a word."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_new_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None  # only "off" (0 or -1) is accepted: no backend here takes it
    do_sample: bool | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_sequences: list[str] | None = None
    details: bool = False
    return_full_text: bool = False
    repetition_penalty: float | None = Field(default=None, gt=0.0)  # only 1.0 (no penalty)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    ignore_eos: bool | None = None
    ignore_eos_token: bool | None = None  # vLLM's LMI name for ignore_eos
    n: int | None = Field(default=None, ge=1)  # 1 only: several choices are the chat schema's n
    decoder_input_details: bool = False  # prompt logprobs: not available


class LMIRequest(_Wire):
    """LMI's standard schema on ``/invocations``: ``{"inputs", "parameters", "stream"}``."""

    inputs: str = Field(min_length=1)
    parameters: LMIParameters | None = None
    stream: bool = False
    model: str
