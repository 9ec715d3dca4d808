"""A model's own Jinja chat template, rendered so user text stays untrusted.

Every client-supplied string (message contents, tool results, call arguments) is put
into the template as a unique placeholder; the rendered text is then split at the
placeholders into *segments*: the template's own text (trusted: its ``<start_of_turn>``
and friends must become control tokens) and the client's text (untrusted: tokenized
with special-token parsing off).  The backend tokenizes each segment accordingly, so
``<start_of_turn>`` typed by a user stays plain text.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app import model as m
from app.errors import InvalidRequest

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: never produced by templates
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")

Segments = tuple[tuple[str, bool], ...]  # (text, trusted)


def _raise(message: str) -> None:
    raise InvalidRequest(f"The model's chat template rejected the conversation: {message}",
                         param="messages")


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: dt.datetime.now(dt.UTC).strftime(fmt)
    return env


def render_segments(source: str, conv: m.Conversation, *, bos_token: str = "",
                    eos_token: str = "") -> Segments:
    texts: list[str] = []

    def slot(text: str) -> str:
        texts.append(text)
        return f"{_OPEN}{len(texts) - 1}{_CLOSE}"

    messages: list[dict[str, Any]] = []
    for i, msg in enumerate(conv.messages):
        for j, part in enumerate(msg.content):
            if not isinstance(part, m.TextPart):
                raise InvalidRequest("This model's chat template takes text only.",
                                     param=f"messages[{i}].content[{j}]", code="unsupported_content_type")
        if msg.tool_calls:
            raise InvalidRequest("Tool calls are not supported for models served with prompt_format "
                                 "'template' yet.", param=f"messages[{i}].tool_calls")
        messages.append({"role": msg.role, "content": slot(msg.text)})
    if conv.tools:
        raise InvalidRequest("Tools are not supported for models served with prompt_format 'template' "
                             "yet.", param="tools")
    try:
        rendered = _environment().from_string(source).render(
            messages=messages, add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token)
    except jinja2.TemplateError as exc:
        raise InvalidRequest(f"The model's chat template failed: {exc}", param="messages") from None
    segments: list[tuple[str, bool]] = []
    pos = 0
    for match in _PLACEHOLDER.finditer(rendered):
        if match.start() > pos:
            segments.append((rendered[pos:match.start()], True))
        segments.append((texts[int(match.group(1))], False))
        pos = match.end()
    if pos < len(rendered):
        segments.append((rendered[pos:], True))
    return tuple((text, trusted) for text, trusted in segments if text)
