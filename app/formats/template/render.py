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

from app.core.conversation import Conversation, FunctionTool, ImagePart, Message, ToolCall, part_param
from app.core.errors import InvalidRequest
from app.core.media import has_image_marks, image_payload, image_segment
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
        self.images: dict[int, str] = {}  # slot number → image segment (app.core.media)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        self.texts.append(text)
        return f"{_OPEN}{len(self.texts) - 1}{_CLOSE}"

    def image(self, text: str) -> str:
        """A placeholder that stands for an image (``text``: its :func:`image_segment`)."""
        self.texts.append(text)
        self.images[len(self.texts) - 1] = text
        return f"{_OPEN}{len(self.texts) - 1}{_CLOSE}"

    def json_hook(self, rendered: str) -> str:
        """``tojson`` output: placeholders inside JSON strings get JSON-escaped texts."""
        def escaped(mt: re.Match[str]) -> str:
            if int(mt.group(1)) in self.images:
                raise InvalidRequest("This model's chat template writes message content as JSON, "
                                     "so an image cannot be placed in it.", param="messages",
                                     code="unsupported_content_type")
            return self(json.dumps(self.texts[int(mt.group(1))], ensure_ascii=False)[1:-1])

        return _PLACEHOLDER.sub(escaped, rendered)

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


def _content(msg: Message, index: int, slot: Any) -> Any:
    """A message's content as one string; a user message's images stand where they were,
    as image placeholders (``slot.image``), the way llama.cpp's own chat endpoint puts its
    media marker into the text.  Without image placeholders (or in another role) images
    are refused naming the part."""
    if not any(isinstance(p, ImagePart) for p in msg.content):
        return slot(msg.text)
    if msg.role != "user" or not hasattr(slot, "image"):
        text_only(msg, index, "This model's chat template")
    pieces: list[str] = []
    for j, part in enumerate(msg.content):
        if isinstance(part, ImagePart):
            pieces.append(slot.image(image_segment(part_param(msg, index, j), image_payload(part.url))))
        else:
            pieces.append(slot(part.text))
    return "".join(pieces)


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
        role = "system" if msg.role == "developer" else msg.role
        d: dict[str, Any] = {"role": role, "content": _content(msg, i, slot)}
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
        number = int(match.group(1))
        image = slots.images.get(number)
        if image is not None and match.group(0)[0] != _OPEN:
            raise InvalidRequest("The model's chat template transformed an image in a way that cannot "
                                 "be kept in place.", param="messages")
        # an image is a trusted segment of its own (made only here); client text is untrusted
        segments.append((image, True) if image is not None else (slots.texts[number], False))
        pos = match.end()
    if pos < len(rendered):
        segments.append((rendered[pos:], True))
    images = set(slots.images.values())
    for text, trusted in segments:
        if trusted and text not in images and has_image_marks(text):
            raise InvalidRequest("The model's chat template produced text that looks like an image.",
                                 param="messages")
        if trusted and (_OPEN in text or _CLOSE in text):
            # a template sliced or transformed a placeholder: refuse rather than leak
            raise InvalidRequest("The model's chat template transformed client text in a way that "
                                 "cannot be kept untrusted.", param="messages")
    return tuple((text, trusted) for text, trusted in segments if text)


def segments_text(segments: Segments) -> str:
    """The prompt as one string (what a text-only transport would send)."""
    return "".join(text for text, _ in segments)
