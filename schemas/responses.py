"""Wire models of the Open Responses create body (OpenAPI 2026-04-24, ``CreateResponseBody``).

Input items are validated here and kept in wire form (dicts) by the gateway: the
response store holds them as sent, and ``app/ingest/responses.py`` turns them into
the internal Conversation.  Responses and streaming events are built as plain
dicts by ``app/encode/responses.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from schemas.base import NullMeansDefault


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
    namespace: str | None = None  # a call of a function of a ``namespace`` tool
    arguments: str
    status: str | None = None


class CustomToolCallItem(_Wire):
    """A call of a ``custom`` tool: freeform ``input`` text instead of JSON arguments."""

    type: Literal["custom_tool_call"]
    id: str | None = None
    call_id: str
    name: str
    namespace: str | None = None
    input: str
    status: str | None = None


class CustomToolCallOutputItem(_Wire):
    type: Literal["custom_tool_call_output"]
    id: str | None = None
    call_id: str
    output: str | list[InputPart]
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


class McpToolInfo(_Wire):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = {}
    annotations: dict[str, Any] | None = None


class McpListToolsItem(_Wire):
    """The tools an MCP server offered (kept so a later turn need not list them again)."""

    type: Literal["mcp_list_tools"]
    id: str | None = None
    server_label: str
    tools: list[McpToolInfo] = Field(default=[], max_length=1024)
    error: str | None = None


class McpCallItem(_Wire):
    type: Literal["mcp_call"]
    id: str = Field(min_length=1, max_length=128)
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: str | dict[str, Any] | None = None  # OpenAI's McpToolCallError (older clients: a string)
    status: str | None = None
    approval_request_id: str | None = None


class McpApprovalRequestItem(_Wire):
    type: Literal["mcp_approval_request"]
    id: str = Field(min_length=1, max_length=128)
    server_label: str
    name: str
    arguments: str


class McpApprovalResponseItem(_Wire):
    type: Literal["mcp_approval_response"]
    id: str | None = None
    approval_request_id: str = Field(min_length=1, max_length=128)
    approve: bool
    reason: str | None = None


class WebSearchSource(_Wire):
    type: Literal["url"] = "url"
    url: str = Field(max_length=8192)


class WebSearchAction(_Wire):
    type: Literal["search", "open_page", "find_in_page"]
    query: str | None = Field(default=None, max_length=65536)
    queries: list[str] | None = Field(default=None, max_length=64)
    sources: list[WebSearchSource] | None = Field(default=None, max_length=1024)
    url: str | None = Field(default=None, max_length=8192)
    pattern: str | None = Field(default=None, max_length=65536)


class WebSearchCallItem(_Wire):
    type: Literal["web_search_call"]
    id: str = Field(min_length=1, max_length=128)
    action: WebSearchAction | None = None
    status: str | None = None
    output: str | None = Field(default=None, alias="ocm:output", max_length=1 << 20)  # what the model read
    error: str | None = Field(default=None, alias="ocm:error", max_length=65536)


class FileSearchResult(_Wire):
    file_id: str | None = Field(default=None, max_length=256)
    filename: str | None = Field(default=None, max_length=4096)
    score: float | None = None
    text: str | None = Field(default=None, max_length=1 << 20)
    attributes: dict[str, str | float | bool] | None = None


class FileSearchCallItem(_Wire):
    """A ``file_search`` call the gateway ran (app/tools/file_search.py); ``ocm:output`` is
    what the model read (a later turn re-renders it), ``results`` only with ``include``."""

    type: Literal["file_search_call"]
    id: str = Field(min_length=1, max_length=128)
    queries: list[str] = Field(default=[], max_length=64)
    status: str | None = None
    results: list[FileSearchResult] | None = Field(default=None, max_length=1024)
    output: str | None = Field(default=None, alias="ocm:output", max_length=1 << 20)
    error: str | None = Field(default=None, alias="ocm:error", max_length=65536)


class CodeInterpreterOutput(_Wire):
    type: Literal["logs", "image"]
    logs: str | None = Field(default=None, max_length=1 << 20)
    url: str | None = Field(default=None, max_length=1 << 20)


class CodeInterpreterFile(_Wire):
    """A file the code wrote (``ocm:files`` of a ``code_interpreter_call``, app/tools/code.py)."""

    filename: str = Field(max_length=4096)
    mime_type: str | None = Field(default=None, max_length=256)
    bytes: int | None = None
    url: str | None = Field(default=None, max_length=1 << 20)


class CodeInterpreterCallItem(_Wire):
    type: Literal["code_interpreter_call"]
    id: str = Field(min_length=1, max_length=128)
    code: str | None = Field(default=None, max_length=1 << 20)
    container_id: str | None = None
    outputs: list[CodeInterpreterOutput] | None = Field(default=None, max_length=256)
    status: str | None = None
    files: list[CodeInterpreterFile] | None = Field(default=None, alias="ocm:files", max_length=256)


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
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[CompactionItem, Tag("compaction")]
    | Annotated[McpListToolsItem, Tag("mcp_list_tools")]
    | Annotated[McpCallItem, Tag("mcp_call")]
    | Annotated[McpApprovalRequestItem, Tag("mcp_approval_request")]
    | Annotated[McpApprovalResponseItem, Tag("mcp_approval_response")]
    | Annotated[WebSearchCallItem, Tag("web_search_call")]
    | Annotated[FileSearchCallItem, Tag("file_search_call")]
    | Annotated[CodeInterpreterCallItem, Tag("code_interpreter_call")]
    | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_item_kind),
]


class FunctionToolParam(_Wire):
    type: Literal["function"] = "function"
    name: str  # checked at ingest, as on every API (app/ingest/validate.py)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomToolFormatText(_Wire):
    type: Literal["text"]


class CustomToolFormatGrammar(_Wire):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str = Field(max_length=262_144)


class CustomToolParam(_Wire):
    """A tool whose input is freeform text (``custom_tool_call.input``), optionally
    constrained by a grammar."""

    type: Literal["custom"]
    name: str  # checked at ingest
    description: str | None = None
    format: Annotated[CustomToolFormatText | CustomToolFormatGrammar,
                      Field(discriminator="type")] | None = None


class NamespaceToolParam(_Wire):
    """A group of function / custom tools; their calls come back with ``namespace`` and ``name``."""

    type: Literal["namespace"]
    name: str  # checked at ingest
    description: str | None = None
    tools: list[Annotated[FunctionToolParam | CustomToolParam, Field(discriminator="type")]] = Field(
        min_length=1, max_length=128)


class McpToolFilter(_Wire):
    tool_names: list[str] = Field(default=[], max_length=1024)
    read_only: bool | None = None


class McpApprovalFilter(_Wire):
    always: McpToolFilter | None = None
    never: McpToolFilter | None = None


class McpToolParam(_Wire):
    """``{"type": "mcp", ...}`` as OpenAI's API has it: a remote MCP server (by URL the
    operator allows, or an operator-configured server by label)."""

    type: Literal["mcp"]
    server_label: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    server_url: str | None = Field(default=None, max_length=2048)
    connector_id: str | None = None
    authorization: str | None = Field(default=None, max_length=8192)
    headers: dict[str, str] | None = None
    allowed_tools: list[str] | McpToolFilter | None = None
    require_approval: Literal["always", "never"] | McpApprovalFilter | None = None
    server_description: str | None = Field(default=None, max_length=8192)


# Tools OpenAI runs itself (or asks the client to run through a dedicated item type).  The
# gateway accepts each of them and applies the per-type policy of ``app/api/responses/tools.py``.
HOSTED_TOOL_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26",
                     "web_search_preview_2025_03_11", "file_search", "code_interpreter", "mcp",
                     "image_generation", "computer_use_preview", "computer", "local_shell", "shell",
                     "apply_patch", "tool_search")


class HostedToolParam(BaseModel):
    """A hosted tool: its type is checked, the rest is kept as sent (for the echo)."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: Literal[HOSTED_TOOL_TYPES]  # type: ignore[valid-type]


def _tool_kind(value: Any) -> str:
    kind = value.get("type", "function") if isinstance(value, dict) else getattr(value, "type", "function")
    if kind in ("function", "custom", "namespace", "mcp"):
        return str(kind)
    return "hosted" if kind in HOSTED_TOOL_TYPES else str(kind)


ToolParam = Annotated[
    Annotated[FunctionToolParam, Tag("function")]
    | Annotated[CustomToolParam, Tag("custom")]
    | Annotated[NamespaceToolParam, Tag("namespace")]
    | Annotated[McpToolParam, Tag("mcp")]
    | Annotated[HostedToolParam, Tag("hosted")],
    Discriminator(_tool_kind),
]


class SpecificFunction(_Wire):
    type: Literal["function"]
    name: str
    namespace: str | None = None


class SpecificCustom(_Wire):
    type: Literal["custom"]
    name: str
    namespace: str | None = None


class SpecificHosted(BaseModel):
    """``{"type": "web_search"}``, ``{"type": "mcp", "server_label": ...}``: force a hosted tool."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: Literal[HOSTED_TOOL_TYPES]  # type: ignore[valid-type]


def _choice_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in ("function", "custom", "allowed_tools"):
        return str(kind)
    return "hosted" if kind in HOSTED_TOOL_TYPES else str(kind)


NamedTool = Annotated[
    Annotated[SpecificFunction, Tag("function")]
    | Annotated[SpecificCustom, Tag("custom")]
    | Annotated[SpecificHosted, Tag("hosted")],
    Discriminator(_choice_kind),
]


class AllowedTools(_Wire):
    type: Literal["allowed_tools"]
    tools: list[NamedTool] = Field(min_length=1, max_length=128)
    mode: Literal["none", "auto", "required"] = "auto"


ToolChoiceParam = Annotated[
    Annotated[SpecificFunction, Tag("function")]
    | Annotated[SpecificCustom, Tag("custom")]
    | Annotated[SpecificHosted, Tag("hosted")]
    | Annotated[AllowedTools, Tag("allowed_tools")],
    Discriminator(_choice_kind),
]


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


class _NullMeansDefault(NullMeansDefault, _Wire):
    pass


class CreateResponseBody(_NullMeansDefault):
    # A field this gateway does not implement is refused by name, never silently ignored;
    # ``prompt`` (stored prompt templates) is accepted only as null.
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationParam | None = None  # app/api/conversations
    tools: list[ToolParam] | None = Field(default=None, max_length=512)
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)  # Codex probes with 1
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
    prompt_cache_retention: Literal["in-memory", "24h", "in_memory"] | None = None
    client_metadata: dict[str, Any] | None = Field(default=None, max_length=64)  # logged, not used
    user: str | None = None


class InputTokensBody(_NullMeansDefault):
    """``POST /v1/responses/input_tokens``: the prompt-shaping fields of a create body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None  # the SDK may omit it: then [default_model]
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationParam | None = None
    tools: list[ToolParam] | None = Field(default=None, max_length=512)
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    truncation: Literal["auto", "disabled"] = "disabled"


class CompactBody(_NullMeansDefault):
    """``POST /v1/responses/compact`` (``CompactResponseMethodPublicBody``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str | list[InputItem] | None = Field(default=None)
    instructions: str | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = Field(default=None, max_length=64)
