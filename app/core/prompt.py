"""What a renderer produces and an adapter sends upstream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.conversation import Conversation, FunctionTool


@dataclass(frozen=True, slots=True)
class Prompt:
    """What an adapter sends upstream.

    ``token_ids`` is authoritative when present (it is what makes user text unable to
    become a control token); ``text`` is for text-only transports.  ``prefill_ids``
    are the tail of ``token_ids`` that the renderer added to steer the assistant
    message (e.g. a forced tool-call header); the parser consumes them first.
    ``stop_token_ids`` end generation; ``stop_strings`` are handed to the backend.

    ``segments`` is a text prompt split into (text, trusted) pieces: trusted pieces are
    the template's own text and may contain control tokens; untrusted pieces are the
    client's text and must be tokenized with special-token parsing off.  A backend
    with a tokenizer turns them into ``token_ids`` before sending.  ``conversation`` is
    set for chat-mode backends that take messages instead of a prompt (Ollama
    ``/api/chat``, OpenAI-compatible upstreams).  ``prefill_text`` is the text form of
    a forced start of the assistant message, fed to text-level parsers first.
    ``tools`` are the offered tools, for parsers that type call arguments by their
    schema.  ``json_schema`` asks the backend to constrain the whole output to the schema
    (grammar / structured outputs); formats set it only when the model's output has no
    reasoning or markers around the answer (Harmony writes the schema into the prompt).
    """

    token_ids: tuple[int, ...] | None
    text: str | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    prefill_ids: tuple[int, ...] = ()
    segments: tuple[tuple[str, bool], ...] = ()
    conversation: Conversation | None = None
    prefill_text: str = ""
    json_schema: dict[str, Any] | None = None
    tools: tuple[FunctionTool, ...] = ()
