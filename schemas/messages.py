"""Wire models of the Anthropic Messages request body (``POST /v1/messages``).

Only the request is modelled: the message object and stream events are plain dicts built by
:mod:`app.api.messages.encode`.  Unknown fields are ignored, as Anthropic's API ignores the
fields of betas it does not apply (``cache_control``, ``citations``, ``service_tier``, ...);
known fields are validated strictly, and an unknown *block type* is a 400 (Anthropic's too).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from schemas.base import NullMeansDefault


class _Wire(NullMeansDefault):
    model_config = ConfigDict(extra="ignore", strict=True)


class TextBlock(_Wire):
    type: Literal["text"]
    text: str


class Base64Source(_Wire):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(_Wire):
    type: Literal["url"]
    url: str


class ImageBlock(_Wire):
    type: Literal["image"]
    source: Annotated[Base64Source | URLSource, Field(discriminator="type")]


class PlainTextSource(_Wire):
    type: Literal["text"]
    media_type: Literal["text/plain"] = "text/plain"
    data: str


class ContentSource(_Wire):
    type: Literal["content"]
    content: str | list[TextBlock]


class FileSource(_Wire):
    type: Literal["file"]
    file_id: str


class DocumentBlock(_Wire):
    """Read into a text block before ingest (:mod:`app.api.messages.documents`)."""

    type: Literal["document"]
    source: Annotated[Base64Source | URLSource | PlainTextSource | ContentSource | FileSource,
                      Field(discriminator="type")]
    title: str | None = None
    context: str | None = None


class ToolUseBlock(_Wire):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolReferenceBlock(_Wire):
    """A tool a client-side tool search loaded (Claude Code's ``ToolSearch``): the tool of
    that name, sent with ``defer_loading: true``, is offered to the model from then on."""

    type: Literal["tool_reference"]
    tool_name: str


class ToolResultBlock(_Wire):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[TextBlock | ImageBlock | ToolReferenceBlock | DocumentBlock,
                                  Field(discriminator="type")]] = ""
    is_error: bool = False


class ThinkingBlock(_Wire):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(_Wire):
    type: Literal["redacted_thinking"]
    data: str


class ServerToolUseBlock(_Wire):
    """A call of a server tool the gateway ran (:mod:`app.api.messages.server_tools`)."""

    type: Literal["server_tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class WebSearchResult(_Wire):
    type: Literal["web_search_result"]
    url: str
    title: str = ""
    encrypted_content: str  # the gateway's sealed copy of what the search said of the page
    page_age: str | None = None


class ServerToolError(_Wire):
    type: Literal["web_search_tool_result_error", "code_execution_tool_result_error",
                  "web_fetch_tool_result_error"]
    error_code: str


class CodeExecutionResult(_Wire):
    type: Literal["code_execution_result"]
    stdout: str = ""
    stderr: str = ""
    return_code: int = 0
    content: list[dict[str, Any]] = Field(default_factory=list)


class WebSearchToolResultBlock(_Wire):
    type: Literal["web_search_tool_result"]
    tool_use_id: str
    content: list[WebSearchResult] | ServerToolError


class CodeExecutionToolResultBlock(_Wire):
    type: Literal["code_execution_tool_result"]
    tool_use_id: str
    content: CodeExecutionResult | ServerToolError


class WebFetchDocument(_Wire):
    type: Literal["document"]
    source: PlainTextSource
    title: str | None = None


class WebFetchResult(_Wire):
    type: Literal["web_fetch_result"]
    url: str
    retrieved_at: str | None = None
    content: WebFetchDocument


class WebFetchToolResultBlock(_Wire):
    type: Literal["web_fetch_tool_result"]
    tool_use_id: str
    content: WebFetchResult | ServerToolError


class ShellToolResultBlock(_Wire):
    """A result of ``code_execution_20250825``'s bash or text editor: ``content`` is the result or
    error object the gateway sent (re-read as text only)."""

    type: Literal["bash_code_execution_tool_result", "text_editor_code_execution_tool_result"]
    tool_use_id: str
    content: dict[str, Any]


class McpToolUseBlock(_Wire):
    """A call of a tool of an ``mcp_servers`` server (the MCP connector), run by the gateway."""

    type: Literal["mcp_tool_use"]
    id: str
    name: str
    server_name: str
    input: dict[str, Any]


class McpToolResultBlock(_Wire):
    type: Literal["mcp_tool_result"]
    tool_use_id: str
    is_error: bool = False
    content: str | list[TextBlock] = ""


ContentBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock
    | RedactedThinkingBlock | ServerToolUseBlock | WebSearchToolResultBlock
    | CodeExecutionToolResultBlock | WebFetchToolResultBlock | ShellToolResultBlock | McpToolUseBlock
    | McpToolResultBlock, Field(discriminator="type")]


class MessageParam(_Wire):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(_Wire):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    defer_loading: bool = False  # offered only once a tool_reference block names it


class ServerTool(_Wire):
    """A tool of a versioned type (``web_search_20250305``, ``code_execution_20250522``, ...):
    Anthropic's server tools, run by the gateway or refused by name
    (:mod:`app.api.messages.server_tools`)."""

    type: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*_[0-9]{8}$")]
    name: str
    max_uses: int | None = Field(default=None, ge=1)
    allowed_domains: list[str] | None = None
    blocked_domains: list[str] | None = None


class ToolChoiceAuto(_Wire):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(_Wire):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(_Wire):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(_Wire):
    type: Literal["none"]


ToolChoice = Annotated[ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone,
                       Field(discriminator="type")]


# "omitted": thinking blocks carry only the signature; any other value ("summarized", and
# Claude Code's "updates") shows the thinking text
ThinkingDisplay = str


class ThinkingEnabled(_Wire):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024)
    display: ThinkingDisplay | None = None


class ThinkingDisabled(_Wire):
    type: Literal["disabled"]


class ThinkingAdaptive(_Wire):
    type: Literal["adaptive"]
    display: ThinkingDisplay | None = None


Thinking = Annotated[ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive, Field(discriminator="type")]


class Metadata(_Wire):
    user_id: str | None = None


class McpToolConfiguration(_Wire):
    enabled: bool = True
    allowed_tools: list[str] | None = None


class McpServer(_Wire):
    """An ``mcp_servers`` entry (Anthropic's MCP connector): run under the operator's MCP
    allow-list and approval policy (:mod:`app.api.messages.mcp`)."""

    type: Literal["url"]
    url: str = Field(max_length=2048)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    authorization_token: str | None = Field(default=None, max_length=8192)
    tool_configuration: McpToolConfiguration | None = None


class MessagesRequest(_Wire):
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None
    tools: list[Tool | ServerTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    service_tier: str | None = None
    mcp_servers: list[McpServer] | None = None


class CountTokensRequest(_Wire):
    """``POST /v1/messages/count_tokens``: the same body without ``max_tokens``."""

    model: str
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[Tool | ServerTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None

