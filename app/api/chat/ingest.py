"""Chat Completions request → :class:`Conversation` + :class:`GenerationParams`."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.conversation import (
    ContentPart,
    Conversation,
    FunctionTool,
    GenerationParams,
    ImagePart,
    Message,
    ResponseFormat,
    TextPart,
    ToolCall,
    ToolChoice,
)
from app.core.errors import InvalidRequest
from app.core.media import check_image_url
from app.items.validate import (
    check_call_id,
    check_function_name,
    check_json_schema,
    logit_bias,
    reasoning_effort,
    stop_strings,
    template_kwargs,
    thinking,
)
from schemas import chat as wire


@dataclass(frozen=True, slots=True)
class ChatIngest:
    model: str
    conversation: Conversation
    params: GenerationParams
    stream: bool
    include_usage: bool


def _parts(content: str | list[wire.TextContentPart] | list[wire.UserContentPart] | None,
           where: str) -> tuple[ContentPart, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(content),)
    parts: list[ContentPart] = []
    for j, part in enumerate(content):
        if isinstance(part, wire.TextContentPart):
            parts.append(TextPart(part.text))
        elif isinstance(part, wire.FileContentPart):  # pragma: no cover - read before ingest (files.py)
            raise InvalidRequest("file parts are read before ingest.", param=f"{where}.content[{j}]")
        else:  # a data: URL of a real image, or a 400 naming the part (app.core.media)
            image = check_image_url(part.image_url.url, f"{where}.content[{j}]")
            parts.append(ImagePart(image.url, part.image_url.detail))
    return tuple(parts)


def _messages(req: wire.ChatCompletionRequest) -> tuple[Message, ...]:
    out: list[Message] = []
    known_calls: set[str] = set()
    for i, m in enumerate(req.messages):
        if isinstance(m, wire.AssistantMessage):
            calls: list[ToolCall] = []
            for j, tc in enumerate(m.tool_calls or []):
                where = f"messages[{i}].tool_calls[{j}]"
                check_function_name(tc.function.name, where + ".function.name")
                check_call_id(tc.id, where + ".id")
                calls.append(ToolCall(tc.id, tc.function.name, tc.function.arguments))
                known_calls.add(tc.id)
            reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
            out.append(Message("assistant", _parts(m.content, f"messages[{i}]"), m.name, tuple(calls),
                               reasoning=reasoning, source=f"messages[{i}]"))
        elif isinstance(m, wire.ToolMessage):
            if m.tool_call_id not in known_calls:
                raise InvalidRequest(
                    f"messages[{i}].tool_call_id {m.tool_call_id!r} does not match any "
                    "tool call of a preceding assistant message.",
                    param=f"messages[{i}].tool_call_id",
                )
            out.append(Message("tool", _parts(m.content, f"messages[{i}]"), tool_call_id=m.tool_call_id,
                               source=f"messages[{i}]"))
        else:
            out.append(Message(m.role, _parts(m.content, f"messages[{i}]"), m.name, source=f"messages[{i}]"))
    return tuple(out)


def _tools(req: wire.ChatCompletionRequest) -> tuple[FunctionTool, ...]:
    tools: list[FunctionTool] = []
    seen: set[str] = set()
    for i, t in enumerate(req.tools or []):
        name = check_function_name(t.function.name, f"tools[{i}].function.name")
        if name in seen:
            raise InvalidRequest(f"Duplicate tool name {name!r}.", param=f"tools[{i}].function.name")
        seen.add(name)
        if t.function.parameters is not None:
            check_json_schema(t.function.parameters, f"tools[{i}].function.parameters")
        tools.append(FunctionTool(name, t.function.description, t.function.parameters,
                                  t.function.strict))
    return tuple(tools)


def _tool_choice(req: wire.ChatCompletionRequest, tools: tuple[FunctionTool, ...]) -> ToolChoice:
    choice = req.tool_choice
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, wire.NamedToolChoice):
        name = choice.function.name
        if name not in {t.name for t in tools}:
            raise InvalidRequest(f"tool_choice names function {name!r}, which is not in tools.",
                                 param="tool_choice")
        return ToolChoice("required", (name,))
    if choice == "required" and not tools:
        raise InvalidRequest("tool_choice 'required' needs at least one tool.", param="tool_choice")
    return ToolChoice(choice)


def _response_format(req: wire.ChatCompletionRequest) -> ResponseFormat | None:
    rf = req.response_format
    if rf is None or isinstance(rf, wire.ResponseFormatText):
        return None
    if isinstance(rf, wire.ResponseFormatJSONObject):
        return ResponseFormat("json_object", {"type": "object"})
    if rf.json_schema.schema_ is None:
        raise InvalidRequest("response_format.json_schema.schema is required.",
                             param="response_format.json_schema.schema")
    check_function_name(rf.json_schema.name, "response_format.json_schema.name")
    check_json_schema(rf.json_schema.schema_, "response_format.json_schema.schema")
    return ResponseFormat(rf.json_schema.name, rf.json_schema.schema_,
                          rf.json_schema.description, rf.json_schema.strict)


def ingest_chat(req: wire.ChatCompletionRequest) -> ChatIngest:
    if req.top_logprobs and not req.logprobs:
        raise InvalidRequest("top_logprobs requires logprobs to be true.", param="top_logprobs")
    if req.stream_options is not None and not req.stream:
        raise InvalidRequest("stream_options is only allowed when stream is true.",
                             param="stream_options")
    stop = stop_strings(req.stop)
    tools = _tools(req)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    params = GenerationParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        ignore_eos=req.ignore_eos,
        user=req.user,
        frequency_penalty=req.frequency_penalty,
        presence_penalty=req.presence_penalty,
        stop=stop,
        logprobs=req.logprobs,
        top_logprobs=req.top_logprobs or 0,
        n=req.n,
        reasoning_effort=reasoning_effort(req.reasoning_effort),
        thinking=thinking(req.reasoning_effort),
        template_kwargs=template_kwargs(req.chat_template_kwargs),
        logit_bias=logit_bias(req.logit_bias),
        tool_choice=_tool_choice(req, tools),
        parallel_tool_calls=req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
    )
    conversation = Conversation(_messages(req), tools, _response_format(req))
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return ChatIngest(req.model, conversation, params, req.stream, include_usage)
