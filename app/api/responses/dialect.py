"""Open Responses and the OpenAI API name a few streaming events differently.

The Open Responses document streams chain of thought as ``response.reasoning.delta`` /
``.done`` and nests the error event's fields under ``error``; OpenAI's API (and so the
OpenAI SDKs' typed event parsers, and every agent framework built on them) uses
``response.reasoning_text.delta`` / ``.done`` and a flat error event.  A client gets the
names it parses, so nothing is silently dropped:

* ``ocm-event-dialect: openai | openresponses`` on the request decides;
* otherwise ``[responses] event_dialect`` (``auto`` by default): ``auto`` answers the
  clients known to parse OpenAI's names in them, and everything else, the Open Responses
  compliance suite and raw HTTP clients included, in the spec's.  Known, by what they send
  (measured; docs/api/responses.md has the table): OpenAI's SDKs and everything built on them (the
  Agents SDK, pydantic-ai, LangChain, instructor) send ``x-stainless-*`` headers and an
  ``OpenAI/...`` user agent; the Codex CLI sends ``originator: codex_exec`` (or
  ``codex_cli_rs``) and a ``codex_...`` user agent; litellm's own HTTP client a
  ``litellm/...`` user agent.

In the OpenAI dialect the error event carries both shapes (flat fields for the SDK, the
nested ``error`` object for clients that read that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EventDialect:
    name: str
    reasoning_delta: str
    reasoning_done: str
    flat_error: bool


OPEN_RESPONSES = EventDialect("openresponses", "response.reasoning.delta", "response.reasoning.done",
                              flat_error=False)
OPENAI = EventDialect("openai", "response.reasoning_text.delta", "response.reasoning_text.done",
                      flat_error=True)
DIALECTS = {d.name: d for d in (OPEN_RESPONSES, OPENAI)}
HEADER = "ocm-event-dialect"


def choose(setting: str, headers: Mapping[str, str]) -> EventDialect:
    """The dialect for one request (``headers``: case-insensitive, like Starlette's)."""
    asked = DIALECTS.get(headers.get(HEADER, "").strip().lower())
    if asked is not None:
        return asked
    if setting in DIALECTS:
        return DIALECTS[setting]
    agent = headers.get("user-agent", "").lower()
    openai_shaped = ("x-stainless-lang" in headers or "originator" in headers
                     or agent.startswith(OPENAI_AGENTS))
    return OPENAI if openai_shaped else OPEN_RESPONSES


# User agents (lowercased prefixes) of clients that parse OpenAI's event names.
OPENAI_AGENTS = ("openai/", "asyncopenai/", "codex", "litellm/")
