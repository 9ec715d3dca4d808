"""A model's own Jinja chat template, rendered so client text stays untrusted.

Every client-supplied string (message contents, reasoning, tool results, string values
of call arguments, tool and parameter descriptions) is put into the template as a
unique placeholder; the rendered text is then split at the placeholders into
*segments*: the template's own text (trusted: its ``<start_of_turn>`` and friends must
become control tokens) and the client's text (untrusted: tokenized with special-token
parsing off).  The backend tokenizes each segment accordingly, so ``<start_of_turn>``
typed by a user stays plain text.

Call arguments reach the template as mappings (parsed from the JSON string), as
Hugging Face templates expect.  When a template serializes a placeholder with
``tojson``, the placeholder is swapped for a new one whose text is the JSON-escaped
original, so the client text stays untrusted *and* the JSON stays valid.  Empty
strings are passed as-is (templates test them for truthiness).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from app.core.conversation import Conversation, FunctionTool, ToolCall
from app.core.errors import InvalidRequest
from app.formats.content import text_only
from app.formats.template.env import RenderCaps, render_raw

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: never produced by templates
# a template that prints a dict with str() shows the placeholders escaped (repr): match both
_PLACEHOLDER = re.compile(r"(?:\ue000|\\ue000)(\d+)(?:\ue001|\\ue001)")
_SAFE_KEY = re.compile(r"[A-Za-z0-9_.\-]*")
_SCHEMA_TEXT_KEYS = frozenset({"description", "title"})

Segments = tuple[tuple[str, bool], ...]  # (text, trusted)


class _Slots:
    """The client strings of one render, addressed by placeholder."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> str:
        if not text:
            return text
        self.texts.append(text)
        return f"{_OPEN}{len(self.texts) - 1}{_CLOSE}"

    def json_hook(self, rendered: str) -> str:
        """``tojson`` output: placeholders inside JSON strings get JSON-escaped texts."""
        return _PLACEHOLDER.sub(
            lambda mt: self(json.dumps(self.texts[int(mt.group(1))], ensure_ascii=False)[1:-1]),
            rendered)

    def value(self, v: Any) -> Any:
        """A JSON value with every string (and every unusual key) made a placeholder."""
        if isinstance(v, str):
            return self(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {(k if _SAFE_KEY.fullmatch(k) else self(k)): self.value(x) for k, x in v.items()}
        return v

    def schema(self, v: Any) -> Any:
        """A JSON schema with its free-text fields (descriptions, titles, enums) as placeholders."""
        if isinstance(v, list):
            return [self.schema(x) for x in v]
        if not isinstance(v, dict):
            return v
        out: dict[str, Any] = {}
        for k, x in v.items():
            if k in _SCHEMA_TEXT_KEYS and isinstance(x, str):
                out[k] = self(x)
            elif k == "enum" and isinstance(x, list):
                out[k] = self.value(x)
            elif k == "properties" and isinstance(x, dict):
                out[k] = {name: self.schema(s) for name, s in x.items()}
            else:
                out[k] = self.schema(x)
        return out


def _arguments(call: ToolCall, where: str) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        raise InvalidRequest("Tool call arguments must be a JSON object.", param=where) from None
    if not isinstance(args, dict):
        raise InvalidRequest("Tool call arguments must be a JSON object.", param=where)
    return args


def template_messages(conv: Conversation, slot: Any = lambda s: s, value: Any = lambda v: v,
                      caps: RenderCaps | None = None) -> list[dict[str, Any]]:
    """The conversation as the dicts HF templates expect (``slot`` wraps client strings).

    Reasoning goes in ``reasoning_content`` (and, next to tool calls, in ``tool_plan``,
    where Command-R templates look for it); ``caps`` says whether call arguments are
    mappings or JSON strings and whether a call-only message has ``None`` content.
    """
    caps = caps or RenderCaps()
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(conv.messages):
        text_only(msg, i, "This model's chat template")
        role = "system" if msg.role == "developer" else msg.role
        d: dict[str, Any] = {"role": role, "content": slot(msg.text)}
        if msg.name:
            d["name"] = msg.name
        if msg.reasoning is not None and role == "assistant":
            d["reasoning_content"] = slot(msg.reasoning)
            if msg.tool_calls:
                d["tool_plan"] = d["reasoning_content"]
        if msg.tool_calls and not msg.text and caps.null_content_with_calls:
            d["content"] = None
        if msg.tool_calls:
            calls = []
            for k, call in enumerate(msg.tool_calls):
                names[call.id] = call.name
                where = f"messages[{i}].tool_calls[{k}].function.arguments"
                args = (value(_arguments(call, where)) if caps.object_arguments
                        else slot(json.dumps(_arguments(call, where), ensure_ascii=False)))
                calls.append({"id": call.id, "type": "function",
                              "function": {"name": call.name, "arguments": args}})
            d["tool_calls"] = calls
        if role == "tool":
            d["tool_call_id"] = msg.tool_call_id or ""
            if msg.tool_call_id in names and "name" not in d:
                d["name"] = names[msg.tool_call_id]
        out.append(d)
    return out


def template_tools(tools: tuple[FunctionTool, ...], slot: Any = lambda s: s,
                   schema: Any = lambda v: v, caps: RenderCaps | None = None) -> list[dict[str, Any]]:
    """Tools in the OpenAI ``{"type": "function", "function": {...}}`` shape (or bare)."""
    flat = caps is not None and caps.flat_tools
    out: list[dict[str, Any]] = []
    for tool in tools:
        fn: dict[str, Any] = {"name": tool.name, "description": slot(tool.description or ""),
                              "parameters": schema(tool.parameters or {"type": "object", "properties": {}})}
        out.append(fn if flat else {"type": "function", "function": fn})
    return out


def render_segments(source: str, conv: Conversation, *, bos_token: str = "",
                    eos_token: str = "", enable_thinking: bool | None = None,
                    add_generation_prompt: bool = True, caps: RenderCaps | None = None,
                    variables: Mapping[str, Any] | None = None) -> Segments:
    """Render ``conv`` (tools included) and split the text into (text, trusted) segments.

    ``caps`` (from :func:`app.formats.template.analysis.analysis.analyze`) adapts the data shapes to
    what the template reads; the default is the Hugging Face convention.
    """
    slots = _Slots()
    messages = template_messages(conv, slots, slots.value, caps)
    tools = template_tools(conv.tools, slots, slots.schema, caps)
    rendered = render_raw(source, messages, tools=tools, add_generation_prompt=add_generation_prompt,
                          bos_token=bos_token, eos_token=eos_token, enable_thinking=enable_thinking,
                          string_hook=slots.json_hook, variables=variables)
    segments: list[tuple[str, bool]] = []
    pos = 0
    for match in _PLACEHOLDER.finditer(rendered):
        if match.start() > pos:
            segments.append((rendered[pos:match.start()], True))
        segments.append((slots.texts[int(match.group(1))], False))
        pos = match.end()
    if pos < len(rendered):
        segments.append((rendered[pos:], True))
    for text, trusted in segments:
        if trusted and (_OPEN in text or _CLOSE in text):
            # a template sliced or transformed a placeholder: refuse rather than leak
            raise InvalidRequest("The model's chat template transformed client text in a way that "
                                 "cannot be kept untrusted.", param="messages")
    return tuple((text, trusted) for text, trusted in segments if text)


def segments_text(segments: Segments) -> str:
    """The prompt as one string (what a text-only transport would send)."""
    return "".join(text for text, _ in segments)
