"""Anthropic Messages request → :class:`Conversation` + :class:`GenerationParams`.

* ``system`` (string or text blocks) → one system message, first; a text block that is Claude
  Code's ``x-anthropic-billing-header: ...`` (metadata for Anthropic's billing, different in
  every session) is left out, so the model never sees it and the prompt's prefix stays the same
  across sessions (the backend's prompt cache);
* a user turn's ``text`` / ``image`` blocks → a user message (images through
  :func:`app.core.media.check_image_url`, as on the other APIs: inline base64 only — a ``url``
  source and ``document`` blocks were read before, :mod:`app.api.messages.documents`);
  each ``tool_result`` block → a ``tool`` message answering a ``tool_use`` of an earlier
  assistant turn (``is_error`` marks its text), in the order the blocks come; a
  ``tool_reference`` block in a result (a client-side tool search, Claude Code's
  ``ToolSearch``) says the tool is now loaded;
* ``tools``: a tool with ``defer_loading: true`` is offered to the model only once a
  ``tool_reference`` names it (Anthropic's semantics; Claude Code's deferred tools and its
  never-called placeholder); a reference to a tool not in ``tools`` is a 400;
* ``tools`` of a versioned type (Anthropic's server tools: ``web_search_*``,
  ``code_execution_20250522``) → the functions the gateway's hosted tool shows the model
  (:mod:`app.api.messages.server_tools`; counted by ``count_tokens`` too); a ``tool`` choice
  naming one forces its call (web search: a search);
* an assistant turn's ``server_tool_use`` → the call the model made, and the
  ``web_search_tool_result`` / ``code_execution_tool_result`` / ``web_fetch_tool_result``
  (the page's text, as sent) / ``bash_code_execution_tool_result`` /
  ``text_editor_code_execution_tool_result`` after it → that call's output
  (search results: title, URL and the sealed summary in ``encrypted_content``, opened like a
  signature; a forged one is a 400), splitting the turn where it stands; ``mcp_tool_use`` /
  ``mcp_tool_result`` (the MCP connector) likewise;
* an assistant turn's ``text`` → content, ``tool_use`` → tool calls (``input`` as JSON text),
  ``thinking`` → the turn's reasoning: the chain of thought sealed in its ``signature``
  (opened by the caller's ``open_thinking``, which refuses a forged or foreign one), never the
  client's ``thinking`` text; ``redacted_thinking`` is opened the same way;
* ``thinking`` → the gateway's reasoning controls: ``enabled`` (effort from ``budget_tokens``),
  ``disabled`` (the template's thinking switch off; Harmony reasons at low effort), ``adaptive``
  (on, the model's own effort).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from app.api.messages import code_tools, server_tools
from app.core.conversation import (
    ContentPart,
    Conversation,
    FunctionTool,
    GenerationParams,
    ImagePart,
    Message,
    ReasoningEffort,
    TextPart,
    ToolCall,
    ToolChoice,
)
from app.core.errors import InvalidRequest
from app.core.media import check_image_url
from app.items.validate import check_call_id, check_function_name, check_json_schema
from app.tools import code, web
from app.tools.mcp import model_name as mcp_name
from schemas import messages as wire

ServerResult = (wire.WebSearchToolResultBlock | wire.CodeExecutionToolResultBlock
                | wire.WebFetchToolResultBlock | wire.ShellToolResultBlock)
# (sealed signature, its parameter) -> the reasoning text it holds, or a 400
OpenThinking = Callable[[str, str], str]

MAX_STOP_SEQUENCES = 4
BILLING_HEADER = "x-anthropic-billing-header:"
AUTO = ToolChoice("auto")  # frozen: one for every request without a tool_choice


@dataclass(frozen=True, slots=True)
class MessagesIngest:
    model: str
    conversation: Conversation
    params: GenerationParams
    stream: bool
    show_thinking: bool = True  # thinking.display "omitted": thinking blocks carry the signature only


def _image(block: wire.ImageBlock, where: str) -> ImagePart:
    if isinstance(block.source, wire.URLSource):
        url = block.source.url  # check_image_url refuses addresses: the gateway fetches none
    else:
        url = f"data:{block.source.media_type};base64,{block.source.data}"
    return ImagePart(check_image_url(url, where + ".source").url)


def _unread(where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: a document block was not read (app/api/messages/documents.py "
                          "runs first).", param=f"{where}.type")


def _user_parts(blocks: list[wire.TextBlock | wire.ImageBlock | wire.ToolReferenceBlock
                             | wire.DocumentBlock], where: str) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for j, b in enumerate(blocks):
        if isinstance(b, wire.TextBlock):
            parts.append(TextPart(b.text))
        elif isinstance(b, wire.ToolReferenceBlock):
            parts.append(TextPart(f"Tool loaded: {b.tool_name}"))
        elif isinstance(b, wire.DocumentBlock):
            raise _unread(f"{where}[{j}]")
        else:
            parts.append(_image(b, f"{where}[{j}]"))
    return parts


def _tool_result(block: wire.ToolResultBlock, where: str, known: set[str]) -> Message:
    if block.tool_use_id not in known:
        raise InvalidRequest(f"{where}.tool_use_id {block.tool_use_id!r} does not match any tool_use "
                             "block of a preceding assistant message.", param=f"{where}.tool_use_id")
    parts = ([TextPart(block.content)] if isinstance(block.content, str)
             else _user_parts(list(block.content), f"{where}.content"))
    if block.is_error:
        parts.insert(0, TextPart("Error: "))
    return Message("tool", tuple(parts), tool_call_id=block.tool_use_id, source=where)


def _user(m: wire.MessageParam, i: int, known: set[str]) -> list[Message]:
    where = f"messages[{i}]"
    if isinstance(m.content, str):
        return [Message("user", (TextPart(m.content),), source=where)]
    out: list[Message] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(m.content):
        at = f"{where}.content[{j}]"
        if isinstance(block, wire.ToolResultBlock):
            if parts:
                out.append(Message("user", tuple(parts), source=where))
                parts = []
            out.append(_tool_result(block, at, known))
        elif isinstance(block, wire.TextBlock | wire.ImageBlock):
            parts.append(TextPart(block.text) if isinstance(block, wire.TextBlock) else _image(block, at))
        elif isinstance(block, wire.DocumentBlock):
            raise _unread(at)
        else:
            raise InvalidRequest(f"{at} is a {block.type} block, which only assistant messages "
                                 "may hold.", param=f"{at}.type")
    if parts or not out:
        out.append(Message("user", tuple(parts), source=where))
    return out


def _server_call(block: wire.ServerToolUseBlock, at: str, known: set[str]) -> ToolCall:
    """A server tool's call as the model made it (``web_search`` → ``browser.search``)."""
    check_call_id(block.id, at + ".id")
    if block.id in known:
        raise InvalidRequest(f"Duplicate tool_use id {block.id!r}.", param=at + ".id")
    known.add(block.id)
    if block.name == server_tools.WEB_SEARCH:
        name = web.SEARCH if "query" in block.input else web.OPEN
    elif block.name == server_tools.CODE_EXECUTION:
        name = code.NAME
    elif block.name in (server_tools.WEB_FETCH, server_tools.BASH, server_tools.EDITOR):
        name = block.name
    else:
        raise InvalidRequest(f"{at}.name: {block.name!r} is not a server tool this gateway runs.",
                             param=at + ".name")
    return ToolCall(block.id, name, orjson.dumps(block.input).decode())


def _server_result(block: ServerResult, at: str, calls: set[str], open_thinking: OpenThinking) -> Message:
    """A server tool's result as the model read it (search results: their sealed summaries)."""
    if block.tool_use_id not in calls:
        raise InvalidRequest(f"{at}.tool_use_id {block.tool_use_id!r} does not match a server_tool_use "
                             "block before it.", param=f"{at}.tool_use_id")
    if isinstance(block, wire.ShellToolResultBlock):
        return Message("tool", (TextPart(code_tools.said(block.content)),), tool_call_id=block.tool_use_id,
                       source=at)
    content = block.content
    if isinstance(content, wire.ServerToolError):
        text = f"Error: {content.error_code}"
    elif isinstance(content, wire.CodeExecutionResult):
        text = content.stdout + (f"\nError: {content.stderr}" if content.stderr else "")
    elif isinstance(content, wire.WebFetchResult):
        text = content.content.source.data  # the page's text, as the client holds it
    else:
        text = "\n".join(f"【{k}†{r.title}†{r.url}】\n"
                         f"{open_thinking(r.encrypted_content, f'{at}.content[{k}].encrypted_content')}"
                         for k, r in enumerate(content))
    return Message("tool", (TextPart(text),), tool_call_id=block.tool_use_id, source=at)


def _assistant(m: wire.MessageParam, i: int, known: set[str], open_thinking: OpenThinking,
               ) -> list[Message]:
    """One assistant turn; a server tool's result splits it (the call, its result, the rest)."""
    where = f"messages[{i}]"
    if isinstance(m.content, str):
        return [Message("assistant", (TextPart(m.content),), source=where)]
    out: list[Message] = []
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    server: set[str] = set()

    def flush() -> None:
        if parts or calls or reasoning:
            out.append(Message("assistant", tuple(parts), tool_calls=tuple(calls),
                               reasoning="\n".join(reasoning) if reasoning else None, source=where))
        parts.clear()
        calls.clear()
        reasoning.clear()

    for j, block in enumerate(m.content):
        at = f"{where}.content[{j}]"
        if isinstance(block, wire.TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, wire.ToolUseBlock):
            check_function_name(block.name, at + ".name")
            check_call_id(block.id, at + ".id")
            if block.id in known:
                raise InvalidRequest(f"Duplicate tool_use id {block.id!r}.", param=at + ".id")
            known.add(block.id)
            calls.append(ToolCall(block.id, block.name, orjson.dumps(block.input).decode()))
        elif isinstance(block, wire.ServerToolUseBlock):
            calls.append(_server_call(block, at, known))
            server.add(block.id)
        elif isinstance(block, wire.McpToolUseBlock):
            check_call_id(block.id, at + ".id")
            if block.id in known:
                raise InvalidRequest(f"Duplicate tool_use id {block.id!r}.", param=at + ".id")
            known.add(block.id)
            calls.append(ToolCall(block.id, mcp_name(block.server_name, block.name),
                                  orjson.dumps(block.input).decode()))
            server.add(block.id)
        elif isinstance(block, wire.McpToolResultBlock):
            if block.tool_use_id not in server:
                raise InvalidRequest(f"{at}.tool_use_id {block.tool_use_id!r} does not match an "
                                     "mcp_tool_use block before it.", param=f"{at}.tool_use_id")
            flush()
            text = (block.content if isinstance(block.content, str)
                    else "".join(b.text for b in block.content))
            out.append(Message("tool", (TextPart(("Error: " if block.is_error else "") + text),),
                               tool_call_id=block.tool_use_id, source=at))
            server.discard(block.tool_use_id)
        elif isinstance(block, ServerResult):
            flush()
            out.append(_server_result(block, at, server, open_thinking))
            server.discard(block.tool_use_id)
        elif isinstance(block, wire.ThinkingBlock):
            reasoning.append(open_thinking(block.signature, at + ".signature"))
        elif isinstance(block, wire.RedactedThinkingBlock):
            reasoning.append(open_thinking(block.data, at + ".data"))
        else:
            raise InvalidRequest(f"{at} is a {block.type} block, which only user messages may hold.",
                                 param=f"{at}.type")
    flush()
    return out or [Message("assistant", (), source=where)]


def _messages(req: wire.MessagesRequest | wire.CountTokensRequest,
              open_thinking: OpenThinking) -> tuple[Message, ...]:
    out: list[Message] = []
    if isinstance(req.system, list):
        text = "\n\n".join(b.text for b in req.system if not b.text.startswith(BILLING_HEADER))
    else:
        text = req.system or ""
    if text:
        out.append(Message("system", (TextPart(text),), source="system"))
    if not req.messages:
        raise InvalidRequest("messages: at least one message is required.", param="messages")
    known: set[str] = set()
    for i, m in enumerate(req.messages):
        if m.role == "assistant":
            out.extend(_assistant(m, i, known, open_thinking))
        else:
            out.extend(_user(m, i, known))
    return tuple(out)


def _references(req: wire.MessagesRequest | wire.CountTokensRequest) -> dict[str, str]:
    """The tools ``tool_reference`` blocks name → where the first such block is."""
    found: dict[str, str] = {}
    for i, m in enumerate(req.messages):
        for j, block in enumerate(m.content if isinstance(m.content, list) else ()):
            if isinstance(block, wire.ToolResultBlock) and isinstance(block.content, list):
                for k, part in enumerate(block.content):
                    if isinstance(part, wire.ToolReferenceBlock):
                        found.setdefault(part.tool_name, f"messages[{i}].content[{j}].content[{k}]")
    return found


def _tools(req: wire.MessagesRequest | wire.CountTokensRequest) -> tuple[FunctionTool, ...]:
    tools: list[FunctionTool] = []
    seen: set[str] = set()
    referenced = _references(req)
    for i, t in enumerate(req.tools or []):
        if isinstance(t, wire.ServerTool):
            seen.add(t.name)  # run by the gateway: functions_of, below
            continue
        name = check_function_name(t.name, f"tools[{i}].name")
        if name in seen:
            raise InvalidRequest(f"Duplicate tool name {name!r}.", param=f"tools[{i}].name")
        seen.add(name)
        check_json_schema(t.input_schema, f"tools[{i}].input_schema")
        if not t.defer_loading or name in referenced:
            tools.append(FunctionTool(name, t.description, t.input_schema))
    for name, where in referenced.items():
        if name not in seen:
            raise InvalidRequest(f"{where} references tool {name!r}, which is not in tools.",
                                 param=f"{where}.tool_name")
    if not tools and not seen:  # no tools (the common request): nothing more to check
        return ()
    hosted = server_tools.functions_of(req.tools)
    taken = sorted({t.name for t in tools} & {f.name for f in hosted})
    if taken:
        raise InvalidRequest(f"tools: a tool of this request has the name of a server tool's function "
                             f"({', '.join(taken)}).", param="tools")
    return (*tools, *hosted)


def _tool_choice(req: wire.MessagesRequest | wire.CountTokensRequest,
                 tools: tuple[FunctionTool, ...]) -> tuple[ToolChoice, bool]:
    """The choice, and whether parallel calls are allowed."""
    choice = req.tool_choice
    if choice is None:
        return AUTO, True
    if isinstance(choice, wire.ToolChoiceNone):
        return ToolChoice("none"), True
    parallel = not choice.disable_parallel_tool_use
    if isinstance(choice, wire.ToolChoiceAuto):
        return ToolChoice("auto"), parallel
    if not tools:
        raise InvalidRequest(f"tool_choice {choice.type!r} needs at least one tool.", param="tool_choice")
    if isinstance(choice, wire.ToolChoiceTool):
        forced = _server_forced(req, choice.name)
        if forced:
            return ToolChoice("required", forced), parallel
        if choice.name not in {t.name for t in tools}:
            raise InvalidRequest(f"tool_choice names tool {choice.name!r}, which is not in tools.",
                                 param="tool_choice.name")
        return ToolChoice("required", (choice.name,)), parallel
    return ToolChoice("required"), parallel


def _server_forced(req: wire.MessagesRequest | wire.CountTokensRequest, name: str) -> tuple[str, ...]:
    """The function a ``tool`` choice naming a server tool forces (web search: a search)."""
    for i, t in server_tools.server_tools(req.tools):
        if t.name == name:
            kind = server_tools.kind_of(t, f"tools[{i}]")
            forced = {server_tools.WEB_SEARCH: (web.SEARCH,),
                      server_tools.WEB_FETCH: (server_tools.WEB_FETCH,),
                      server_tools.SHELL: (server_tools.BASH, server_tools.EDITOR)}
            return forced.get(kind, (code.NAME,))
    return ()


def _thinking(thinking: wire.Thinking | None) -> tuple[ReasoningEffort | None, bool | None]:
    """(reasoning_effort, the thinking switch) from ``thinking``."""
    if thinking is None:
        return None, None
    if isinstance(thinking, wire.ThinkingDisabled):
        return "low", False
    if isinstance(thinking, wire.ThinkingAdaptive):
        return None, True
    budget = thinking.budget_tokens
    return ("low" if budget < 4096 else "medium" if budget < 16384 else "high"), True


def _prompt(req: wire.MessagesRequest | wire.CountTokensRequest, open_thinking: OpenThinking,
            **sampling: Any) -> tuple[Conversation, GenerationParams]:
    """The conversation and the prompt's controls, with ``sampling`` (a message's own
    parameters) in the same :class:`GenerationParams`: built once."""
    tools = _tools(req)
    choice, parallel = _tool_choice(req, tools)
    effort, switch = _thinking(req.thinking)
    params = GenerationParams(reasoning_effort=effort, thinking=switch, tool_choice=choice,
                              parallel_tool_calls=parallel, **sampling)
    return Conversation(_messages(req, open_thinking), tools), params


def conversation_of(req: wire.MessagesRequest | wire.CountTokensRequest,
                    open_thinking: OpenThinking) -> tuple[Conversation, GenerationParams]:
    """What ``count_tokens`` and a message share: the conversation and the prompt's controls."""
    return _prompt(req, open_thinking)


def ingest_messages(req: wire.MessagesRequest, open_thinking: OpenThinking) -> MessagesIngest:
    if req.top_k is not None:
        raise InvalidRequest("top_k sampling is not available through this gateway; leave it out.",
                             param="top_k", code="unsupported_parameter")
    stop = tuple(req.stop_sequences) if req.stop_sequences else ()
    if stop and (len(stop) > MAX_STOP_SEQUENCES or not all(stop)):
        raise InvalidRequest(f"stop_sequences takes up to {MAX_STOP_SEQUENCES} non-empty strings.",
                             param="stop_sequences")
    thinking = req.thinking
    if isinstance(thinking, wire.ThinkingEnabled) and thinking.budget_tokens >= req.max_tokens:
        raise InvalidRequest("max_tokens must be greater than thinking.budget_tokens.",
                             param="max_tokens")
    conversation, params = _prompt(req, open_thinking, max_tokens=req.max_tokens,
                                   temperature=req.temperature, top_p=req.top_p, stop=stop,
                                   user=req.metadata.user_id if req.metadata else None)
    display = getattr(thinking, "display", None) if thinking is not None else None
    return MessagesIngest(req.model, conversation, params, req.stream, show_thinking=display != "omitted")
