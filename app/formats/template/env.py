"""The sandboxed Jinja environment Hugging Face chat templates expect, and a raw renderer.

Templates are written for ``transformers``' ``apply_chat_template``: a sandboxed
environment (mutable, as llama.cpp's minja: some templates ``append`` to their own lists;
every render gets freshly built data, so nothing shared can be mutated) with
``trim_blocks`` / ``lstrip_blocks``, loop controls, ``raise_exception``, ``strftime_now``
and a ``tojson`` filter that keeps non-ASCII text.
:func:`render_raw` renders plain Python data (messages as dicts, tools as OpenAI
``{"type": "function", "function": {...}}`` dicts); it knows nothing about placeholders,
which :mod:`app.formats.template.render` layers on top (through the ``string_hook`` of
:func:`environment`), and the analyzer in :mod:`app.formats.template.analysis` calls it directly.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from app.core.errors import InvalidRequest

StringHook = Callable[[str], str]
"""Maps every string ``tojson`` writes (already JSON-escaped, without quotes) to its output."""


@dataclass(frozen=True, slots=True)
class RenderCaps:
    """How a template wants its data (probed by :mod:`app.formats.template.analysis.probe`)."""

    supports_tools: bool = False
    supports_parallel_calls: bool = False
    object_arguments: bool = True  # call arguments as mappings (else as JSON strings)
    flat_tools: bool = False  # tools as bare function objects (no ``{"type", "function"}``)
    null_content_with_calls: bool = False  # a call-only message has content None, not ""


class TemplateRejected(InvalidRequest):
    """The template called ``raise_exception`` (it refuses this conversation shape)."""


def _raise(message: str) -> None:
    raise TemplateRejected(f"The model's chat template rejected the conversation: {message}",
                           param="messages")


def _plain(value: Any) -> Any:
    """Generators (``map(...)`` results) and other iterables become lists for ``tojson``."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, jinja2.Undefined):
        return None
    if hasattr(value, "__iter__"):
        return [_plain(v) for v in value]
    return value


def _to_json(value: Any, hook: StringHook | None, indent: int | None = None,
             separators: tuple[str, str] | None = None, sort_keys: bool = False,
             ensure_ascii: bool = False) -> str:
    text = json.dumps(_plain(value), ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)
    return hook(text) if hook is not None else text


def environment(string_hook: StringHook | None = None) -> SandboxedEnvironment:
    """A fresh environment; ``string_hook`` post-processes every ``tojson`` output."""
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                               extensions=["jinja2.ext.loopcontrols"])

    def tojson(value: Any, indent: int | None = None, separators: tuple[str, str] | None = None,
               sort_keys: bool = False, ensure_ascii: bool = False) -> str:
        return _to_json(value, string_hook, indent, separators, sort_keys, ensure_ascii)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: now().strftime(fmt)
    return env


# The clock templates see. The analysis freezes it: two renders it compares must not differ
# because a second passed between them (a template that prints the time would otherwise
# get the time as part of its markers).
FROZEN_CLOCK: contextvars.ContextVar[dt.datetime | None] = contextvars.ContextVar("frozen_clock",
                                                                                  default=None)


def now() -> dt.datetime:
    return FROZEN_CLOCK.get() or dt.datetime.now(dt.UTC)


_TOOL_VARIABLES = ("functions", "datetime")  # set with tools; a template may read them without


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> jinja2.Template:
    return environment().from_string(source)


def render_raw(source: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "",
               enable_thinking: bool | None = None, string_hook: StringHook | None = None,
               variables: Mapping[str, Any] | None = None) -> str:
    """Render ``source`` over plain data; template errors become :class:`InvalidRequest`.
    ``variables``: extra template variables (they never replace the ones set here)."""
    context: dict[str, Any] = {**(variables or {}), "messages": messages,
                               "add_generation_prompt": add_generation_prompt,
                               "bos_token": bos_token, "eos_token": eos_token}
    if tools:
        context["tools"] = tools
        # Firefunction-style templates read the tools as a JSON string and a date
        context["functions"] = _to_json(tools, string_hook, indent=2)
        context["datetime"] = now().strftime("%b %d %Y %H:%M:%S GMT")
    if enable_thinking is not None:
        context["enable_thinking"] = enable_thinking
    try:
        template = (_compiled(source) if string_hook is None
                    else environment(string_hook).from_string(source))
        try:
            return template.render(**context)
        except jinja2.UndefinedError as exc:
            # Templates written for ``functions`` (Firefunction) read it even without tools,
            # as HF's apply_chat_template would be given it: render again with none offered.
            if tools or not any(f"'{name}'" in str(exc) for name in _TOOL_VARIABLES):
                raise
            return template.render(**context, functions=_to_json([], string_hook, indent=2),
                                   datetime=now().strftime("%b %d %Y %H:%M:%S GMT"))
    except InvalidRequest:
        raise
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError,
            IndexError) as exc:
        raise InvalidRequest(f"The model's chat template failed: {exc}", param="messages") from None
