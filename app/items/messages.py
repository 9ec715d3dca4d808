"""Stored items: a request's ``input`` as the stores keep it, and stored items as the
internal :class:`~app.core.conversation.Message` s the prompt formats render.

Items stay in wire form (dicts, ids filled in) because that is what the response store and
conversations keep and what ``previous_response_id`` chains: context = previous input +
previous output + new input.  :func:`items_to_messages` folds consecutive assistant-side
items (reasoning, assistant messages, function calls) into one internal assistant
:class:`Message`, the shape the renderers expect; hosted-tool items (``mcp_call``,
``web_search_call``, ``file_search_call``, ``code_interpreter_call``) come back as the calls
they were, with what is kept of their results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from app.core.conversation import ContentPart, ImagePart, Message, TextPart, ToolCall
from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.core.media import check_image_url
from app.core.shed import shed
from app.formats.harmony.text import check_runs
from app.items.names import custom_arguments, model_name
from app.items.validate import check_call_id, check_function_name
from app.tools import code, file_search, web
from schemas import responses as wire

_ITEMS = TypeAdapter(list[wire.InputItem])
CHUNK = 1000  # items validated per pydantic call: 100,000 in one held the GIL ~140 ms
_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
              "compaction": "cmp_", "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_",
              "mcp_list_tools": "mcpl_", "mcp_approval_response": "mcpa_"}


def new_input_items(body: wire.CreateResponseBody | wire.CompactBody) -> list[dict[str, Any]]:
    """The request's ``input`` as stored items (a string becomes one user message)."""
    if body.input is None:
        items: list[Any] = []
    elif isinstance(body.input, str):
        items = [wire.UserMessage(role="user", content=[wire.InputText(type="input_text", text=body.input)])]
    else:
        items = list(body.input)
    if (body.input is None and body.previous_response_id is None
            and getattr(body, "conversation", None) is None):
        raise InvalidRequest("input is required (or continue a response with previous_response_id "
                             "or conversation).", param="input", code="missing_required_parameter")
    return stored_items(items, "input")  # [] is an empty turn (Codex probes with one)


def stored_items(items: list[Any], param: str) -> list[dict[str, Any]]:
    """Validated input items (``param[i]``) in wire form, as stores keep them: ids filled in,
    string content made a list of parts."""
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if isinstance(item, wire.ItemReference):
            raise InvalidRequest("item_reference inputs are not supported; send the item itself or "
                                 "use previous_response_id.", param=f"{param}[{i}]")
        data = item.model_dump(by_alias=True, exclude_none=True)
        data.setdefault("type", "message")
        if not data.get("id"):
            data["id"] = random_id(_ID_PREFIX.get(data["type"], "item_"))
        if isinstance(data.get("content"), str):
            kind = "output_text" if data.get("role") == "assistant" else "input_text"
            data["content"] = [{"type": kind, "text": data["content"]}]
        if data.get("role") in ("system", "developer"):  # instructions: never stored unrenderable
            check_runs("".join(p.get("text", "") for p in data.get("content") or ()
                               if isinstance(p, dict)), f"{param}[{i}].content")
        out.append(data)
    return out


@dataclass
class _Assistant:
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def flush(self, out: list[Message]) -> None:
        if self.reasoning or self.content or self.calls:
            out.append(Message("assistant", (TextPart("".join(self.content)),) if self.content else (),
                               tool_calls=tuple(self.calls),
                               reasoning="\n".join(self.reasoning) if self.reasoning else None))
        self.reasoning, self.content, self.calls = [], [], []


def _parts(content: list[Any], where: str) -> tuple[ContentPart, ...]:
    parts: list[ContentPart] = []
    for j, part in enumerate(content):
        if isinstance(part, wire.InputText | wire.OutputText):
            parts.append(TextPart(part.text))
        elif isinstance(part, wire.InputImage):
            if not part.image_url:
                raise InvalidRequest("input_image needs image_url or file_id.",
                                     param=f"{where}.content[{j}]")
            image = check_image_url(part.image_url, f"{where}.content[{j}]")  # data: URLs only
            parts.append(ImagePart(image.url, part.detail))
        elif isinstance(part, wire.Refusal):
            parts.append(TextPart(part.refusal))
        else:  # pragma: no cover - resolve.py turns input_file parts into text first
            raise InvalidRequest("input_file parts are read by the gateway before this point.",
                                 param=f"{where}.content[{j}]", code="unsupported_content_type")
    return tuple(parts)


def _web_call(item: wire.WebSearchCallItem) -> tuple[str, str, str]:
    """A ``web_search_call`` as the browser call it was (:mod:`app.tools.web`) and what the
    model read then (the item's ``ocm:output`` or ``ocm:error``; an item without them, from
    another server or an older store, keeps only its sources)."""
    action = item.action
    if action is None or action.type == "search":
        query = (action.query or " ".join(action.queries or [])) if action else ""
        urls = [s.url for s in (action.sources or [])] if action else []
        result = ("Searched earlier; the results are not kept" +
                  (": sources " + ", ".join(urls) if urls else "") + ".")
        name, arguments = web.SEARCH, json.dumps({"query": query}, ensure_ascii=False)
    elif action.type == "open_page":
        name, arguments = web.OPEN, json.dumps({"id": action.url or ""}, ensure_ascii=False)
        result = "Opened earlier; the page's text is not kept."
    else:
        found = {"pattern": action.pattern or "", "url": action.url or ""}
        name, arguments = web.FIND, json.dumps(found, ensure_ascii=False)
        result = "Searched the page earlier; the lines found are not kept."
    if item.output is not None:
        result = item.output
    elif item.error is not None:
        result = f"Error: {item.error}"
    return name, arguments, result


def _file_search_result(item: wire.FileSearchCallItem) -> str:
    """What the model read of a ``file_search_call``: its ``ocm:output`` / ``ocm:error``; an
    item without them (another server's, or sent by a client) shows its results, if any."""
    if item.output is not None:
        return item.output
    if item.error is not None:
        return f"Error: {item.error}"
    results = [f"# {r.filename or r.file_id or '(unnamed)'}\n{r.text or ''}" for r in item.results or []]
    return "File search results (earlier):\n" + "\n\n".join(results) if results else (
        "Searched earlier; the results are not kept.")


def _mcp_error(error: str | dict[str, Any]) -> str:
    """An ``mcp_call``'s error as the model read it (OpenAI's structured error: its message,
    or its content's text)."""
    if isinstance(error, str):
        return error
    content = error.get("content")
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(error.get("message", ""))


def validate_items(items: list[Any]) -> list[Any]:
    """``_ITEMS.validate_python(items)`` in pieces of :data:`CHUNK` items, so that a thread doing
    it gives the GIL back between them (items are validated each on its own); a list any piece
    refuses is validated again in one call, for exactly its error."""
    if len(items) <= CHUNK:
        return _ITEMS.validate_python(items)
    try:
        return [item for i in range(0, len(items), CHUNK)
                for item in _ITEMS.validate_python(items[i:i + CHUNK])]
    except ValidationError:
        return _ITEMS.validate_python(items)


_PLAIN_KEYS = frozenset({"type", "id", "role", "content", "status"})
_PLAIN_ROLES = frozenset({"user", "system", "developer"})


def _plain(item: Any) -> tuple[str, tuple[ContentPart, ...]] | None:
    """(role, parts) of a user / system / developer message of text only, in the form
    :func:`stored_items` writes (and a client sends): read without building its model, as
    ``wire.UserMessage`` would accept it (strict types); None for any other item, validated
    as before.  100,000 such items: validating them again took ~1 s of a count."""
    if type(item) is not dict or not item.keys() <= _PLAIN_KEYS:
        return None
    role, kind, content = item.get("role"), item.get("type", "message"), item.get("content")
    if (type(role) is not str or role not in _PLAIN_ROLES or type(kind) is not str or kind != "message"
            or not (item.get("id") is None or type(item["id"]) is str)
            or not (item.get("status") is None or type(item["status"]) is str)):
        return None
    if type(content) is str:
        return role, (TextPart(content),)
    if type(content) is not list:
        return None
    parts: list[ContentPart] = []
    for part in content:
        if (type(part) is not dict or not part.keys() <= {"type", "text"} or part.get("type") != "input_text"
                or type(part.get("text")) is not str):
            return None
        parts.append(TextPart(part["text"]))
    return role, tuple(parts)


def _models(rest: list[Any], items: list[Any]) -> list[Any]:
    """The models of ``rest`` (the items :func:`_plain` did not read); on an invalid one, the
    error of validating all ``items``, as a request always had."""
    try:
        return validate_items(rest)
    except ValidationError:
        validate_items(items)
        raise


def items_to_messages(items: list[dict[str, Any]], first_input: int = 0,
                      labels: list[str] | None = None) -> tuple[Message, ...]:
    """``items[first_input:]`` are the request's ``input`` (errors name them ``input[i]``);
    the ones before come from ``previous_response_id``.  ``labels`` (one per item) name
    them instead, for inputs :mod:`app.items.resolve` expanded."""
    plain = [_plain(item) for item in items]
    parsed = _models([item for item, p in zip(items, plain, strict=True) if p is None], items)
    models = iter(parsed)
    out: list[Message] = []
    asst = _Assistant()
    known_calls: set[str] = set()
    denied = {item.approval_request_id for item in parsed
              if isinstance(item, wire.McpApprovalResponseItem) and not item.approve}
    for i, read in enumerate(plain):
        if labels is not None:
            at = labels[i]
        else:
            at = f"input[{i - first_input}]" if i >= first_input else "previous_response_id"
        if read is not None:  # a user / system / developer message of text
            asst.flush(out)
            out.append(Message(read[0], read[1], source=at))  # type: ignore[arg-type]
            continue
        item = next(models)
        if isinstance(item, wire.ReasoningItem):
            if asst.content or asst.calls:
                asst.flush(out)
            texts = [c.text for c in item.content or []] or [s.text for s in item.summary]
            asst.reasoning.append("".join(texts))
        elif isinstance(item, wire.AssistantMessage):
            if asst.calls:
                asst.flush(out)
            content = item.content if isinstance(item.content, list) else [
                wire.OutputText(type="output_text", text=item.content)]
            asst.content.append("".join(p.text for p in _parts(content, at) if isinstance(p, TextPart)))
        elif isinstance(item, wire.FunctionCallItem | wire.CustomToolCallItem):
            check_function_name(item.name, f"{at}.name")
            if item.namespace is not None:
                check_function_name(item.namespace, f"{at}.namespace")
            check_call_id(item.call_id, f"{at}.call_id")
            arguments = (item.arguments if isinstance(item, wire.FunctionCallItem)
                         else custom_arguments(item.input))
            asst.calls.append(ToolCall(item.call_id, model_name(item.name, item.namespace), arguments))
            known_calls.add(item.call_id)
        elif isinstance(item, wire.FunctionCallOutputItem | wire.CustomToolCallOutputItem):
            asst.flush(out)
            if item.call_id not in known_calls:
                raise InvalidRequest(f"No tool call with call_id {item.call_id!r} precedes this output.",
                                     param=f"{at}.call_id")
            if isinstance(item.output, str):
                output = item.output
            else:
                parts = _parts(item.output, at)
                if any(not isinstance(p, TextPart) for p in parts):  # never dropped silently
                    j = next(j for j, p in enumerate(parts) if not isinstance(p, TextPart))
                    raise InvalidRequest(f"Images in a {item.type} are not supported; "
                                         "send them in a user message.",
                                         param=f"{at}.output[{j}]", code="unsupported_content_type")
                output = "".join(p.text for p in parts if isinstance(p, TextPart))
            out.append(Message("tool", (TextPart(output),), tool_call_id=item.call_id, source=at))
        elif isinstance(item, wire.McpCallItem | wire.McpApprovalRequestItem):
            # a hosted call re-rendered for the model: the call and what it returned (an approval
            # request only once the client denied it; approved, it ran as an mcp_call)
            if isinstance(item, wire.McpApprovalRequestItem) and item.id not in denied:
                continue
            check_function_name(item.server_label, f"{at}.server_label")
            check_function_name(item.name, f"{at}.name")
            asst.calls.append(ToolCall(item.id, model_name(item.name, item.server_label), item.arguments))
            asst.flush(out)
            result = ("The user did not approve this call." if isinstance(item, wire.McpApprovalRequestItem)
                      else item.output or "" if item.error is None else f"Error: {_mcp_error(item.error)}")
            out.append(Message("tool", (TextPart(result),), tool_call_id=item.id, source=at))
        elif isinstance(item, wire.WebSearchCallItem):
            # a search run in an earlier response: the call, and what is left of its result
            name, arguments, result = _web_call(item)
            asst.calls.append(ToolCall(item.id, name, arguments))
            asst.flush(out)
            out.append(Message("tool", (TextPart(result),), tool_call_id=item.id, source=at))
        elif isinstance(item, wire.FileSearchCallItem):
            # msearch as it was called, and what the model read (ocm:output), else the results
            arguments = json.dumps({"queries": item.queries}, ensure_ascii=False)
            asst.calls.append(ToolCall(item.id, file_search.MSEARCH, arguments))
            asst.flush(out)
            out.append(Message("tool", (TextPart(_file_search_result(item)),), tool_call_id=item.id,
                               source=at))
        elif isinstance(item, wire.CodeInterpreterCallItem):
            asst.calls.append(ToolCall(item.id, code.NAME, json.dumps({"code": item.code or ""},
                                                                      ensure_ascii=False)))
            asst.flush(out)
            logs = "".join(o.logs or "" for o in item.outputs or [] if o.type == "logs")
            logs += code.files_note([f.model_dump() for f in item.files or []])
            out.append(Message("tool", (TextPart(logs),), tool_call_id=item.id, source=at))
        elif isinstance(item, wire.McpListToolsItem | wire.McpApprovalResponseItem):
            continue  # listings feed the tools, approvals the next run; neither is prompt text
        elif isinstance(item, wire.UserMessage):
            asst.flush(out)
            user_content = item.content if isinstance(item.content, list) else [
                wire.InputText(type="input_text", text=item.content)]
            out.append(Message(item.role, _parts(user_content, at), source=at))
        else:  # pragma: no cover - references are refused and compactions expanded before
            raise InvalidRequest("Unsupported input item.", param=at)
    asst.flush(out)
    shed(parsed)  # 100,000 item models freed at once hold the GIL ~70 ms
    return tuple(out)
