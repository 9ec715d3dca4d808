"""Prompt formats: each pairs a renderer (Conversation → Prompt) with its output parser.

A served model has exactly one format (config ``prompt_format``).  The pipeline asks
the format to render the conversation and, for the resulting prompt, to build the
incremental parser that turns the backend's chunks back into events:

* ``harmony``: openai-harmony token ids; :class:`app.formats.harmony.parse.HarmonyEventParser`.
* ``openchatml``: OpenChatML 2.2 text prompts, parsed back at the text level
  (:mod:`app.formats.openchatml.parse`), so it works over text-only transports too.
* ``template``: the model's own Jinja chat template, rendered into trusted / untrusted
  segments; a text-level parser for its markers.
* ``chat``: no rendering at all — the conversation goes to a chat-mode backend (Ollama
  ``/api/chat``, an OpenAI-compatible server), whose structured deltas are mapped to
  events by :class:`app.formats.chat.parse.DeltaParser`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from app.core.conversation import Conversation, GenerationParams
from app.core.errors import InvalidRequest
from app.core.prompt import Prompt
from app.formats.chat.parse import DeltaParser
from app.formats.harmony.answer import HarmonyAnswerWatch
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.render import HarmonyOptions, render_harmony
from app.formats.harmony.vocab import VOCAB_SIZE
from app.formats.openchatml.parse import OpenChatMLDecoder
from app.formats.openchatml.render import OpenChatMLOptions, render_openchatml
from app.formats.parsing.base import EventParser
from app.formats.parsing.text import TextEventParser
from app.formats.template.analysis.analysis import analyze
from app.formats.template.analysis.result import ContentMode, ReasoningMode
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.answer import TemplateAnswerWatch, call_triggers
from app.formats.template.forced import Prefilled, forced_call
from app.formats.template.parse import template_decoder
from app.formats.template.render import render_segments


class PromptFormat(Protocol):
    @property
    def name(self) -> str: ...

    async def prepare(self) -> None:
        """Called before every render; a format that needs I/O first (a template fetched
        from the backend) does it here, once."""
        ...

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt: ...

    def parser(self, prompt: Prompt, prompt_tokens: int) -> EventParser: ...


@dataclass(frozen=True, slots=True)
class HarmonyFormat:
    options: HarmonyOptions = field(default_factory=HarmonyOptions)
    name: str = "harmony"

    async def prepare(self) -> None:
        return None

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt:
        for token, _ in params.logit_bias:
            if token >= VOCAB_SIZE:
                raise InvalidRequest(f"Token id {token} is not in this model's vocabulary "
                                     f"(o200k_harmony: 0 to {VOCAB_SIZE - 1}).",
                                     param=f"logit_bias.{token}")
        return render_harmony(conv, params, self.options)

    def parser(self, prompt: Prompt, prompt_tokens: int) -> EventParser:
        spaces = frozenset(t.namespace for t in prompt.tools if t.namespace)
        builtins = frozenset(t.builtin for t in prompt.tools if t.builtin)
        return HarmonyEventParser(prompt_tokens, prompt.prefill_ids, spaces, builtins)

    def answer_watch(self, prompt: Prompt) -> HarmonyAnswerWatch:
        """Where the final answer starts (a response format constrains only that part)."""
        return HarmonyAnswerWatch(prompt.prefill_ids)


@dataclass(frozen=True, slots=True)
class TemplateFormat:
    """A Jinja chat template; output parsed by the template's differential analysis
    (:mod:`app.formats.template.analysis`), memoized per template source."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    name: str = "template"

    async def prepare(self) -> None:
        return None

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt:
        analysis = analyze(self.source)
        if conv.tools and params.tool_choice.mode != "none" and analysis.tools.format is ToolFormat.NONE:
            # The template has no way to show tools to the model, nor a call syntax to parse:
            # dropping them silently would answer "required" with plain text.
            raise InvalidRequest("This model's chat template has no tool-call syntax, so it cannot "
                                 "be given tools.", param="tools", code="tools_not_supported")
        variables: dict[str, object] = dict(params.template_kwargs)
        if params.thinking is not None:  # reasoning_effort drives a thinking switch, if there is one
            variables.setdefault("enable_thinking", params.thinking)
        segments = render_segments(self.source, conv, bos_token=self.bos_token,
                                   eos_token=self.eos_token, caps=analysis.caps, variables=variables)
        rf = conv.response_format
        if rf is not None and analysis.content.mode is not ContentMode.PLAIN:
            raise InvalidRequest("response_format is not available for this model: its chat "
                                 "template wraps the answer in markers, so the answer cannot be "
                                 "constrained to the schema.", param="response_format")
        tail = segments[-1][0] if segments and segments[-1][1] else ""
        forced = forced_call(self.source, analysis, params, conv.tools, tail)  # a forced call, opened
        if forced is not None:
            return Prompt(token_ids=None, segments=(*segments, (forced.prefill, True)) if forced.prefill
                          else segments, tools=conv.tools, prefill_text=forced.prefill,
                          json_schema=forced.schema)
        offers_tools = bool(conv.tools) and params.tool_choice.mode != "none"
        # Reasoning or tools around the answer: only the answer is constrained, found by
        # answer_watch (app/engine/constrained.py); otherwise the whole output is the answer.
        whole = rf is not None and analysis.reasoning.mode is ReasoningMode.NONE and not (
            offers_tools and call_triggers(analysis))
        return Prompt(token_ids=None, segments=segments, tools=conv.tools,
                      json_schema=rf.schema if rf is not None and whole else None)

    def answer_watch(self, prompt: Prompt) -> TemplateAnswerWatch | None:
        if prompt.prefill_text or prompt.json_schema is not None:
            return None  # a forced call is never constrained to the response format
        tail = prompt.segments[-1][0] if prompt.segments and prompt.segments[-1][1] else ""
        return TemplateAnswerWatch(analyze(self.source), tail, bool(prompt.tools))

    def parser(self, prompt: Prompt, prompt_tokens: int) -> EventParser:
        decoder = template_decoder(self.source, prompt.segments, tools=prompt.tools,
                                   eos_token=self.eos_token)
        if prompt.prefill_text:
            return TextEventParser(Prefilled(decoder, prompt.prefill_text), prompt_tokens)
        return TextEventParser(decoder, prompt_tokens)


@dataclass(frozen=True, slots=True)
class OpenChatMLFormat:
    """OpenChatML 2.2: a text prompt (trusted markup + escaped client text as segments),
    parsed back by the text-level OpenChatML decoder."""

    options: OpenChatMLOptions = field(default_factory=OpenChatMLOptions)
    require_channels: bool = False
    name: str = "openchatml"

    async def prepare(self) -> None:
        return None

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt:
        return render_openchatml(conv, params, self.options)

    def parser(self, prompt: Prompt, prompt_tokens: int) -> EventParser:
        decoder = OpenChatMLDecoder(prefill=prompt.prefill_text, require_channels=self.require_channels)
        return TextEventParser(decoder, prompt_tokens)


@dataclass(frozen=True, slots=True)
class ChatFormat:
    """Pass the conversation through to a chat-mode backend."""

    name: str = "chat"

    async def prepare(self) -> None:
        return None

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt:
        return Prompt(token_ids=None, conversation=conv)

    def parser(self, prompt: Prompt, prompt_tokens: int) -> EventParser:
        return DeltaParser(prompt_tokens)


# (chat_template, bos_token, eos_token, chat_template_tool_use or "")
TemplateFetcher = Callable[[], Awaitable[tuple[str, str, str, str]]]


class BackendTemplateFormat:
    """A template format whose template comes from the backend (llama.cpp ``/props``).

    Fetched on first use, not at startup, so the gateway starts before its backends;
    a failed fetch is retried by the next request.  A model that also carries a
    ``chat_template_tool_use`` (Hermes-2-Pro / 3, Command-R GGUFs) renders requests with
    tools through it, as ``transformers`` does; its output is parsed by the same one.
    """

    name = "template"

    def __init__(self, fetch: TemplateFetcher) -> None:
        self._fetch = fetch
        self._format: TemplateFormat | None = None
        self._tool_use: TemplateFormat | None = None
        self._lock = asyncio.Lock()

    async def prepare(self) -> None:
        if self._format is not None:
            return
        async with self._lock:
            if self._format is None:
                source, bos, eos, tool_use = await self._fetch()
                if tool_use:
                    self._tool_use = TemplateFormat(tool_use, bos_token=bos, eos_token=eos)
                self._format = TemplateFormat(source, bos_token=bos, eos_token=eos)

    def _ready(self, tools: bool = False) -> TemplateFormat:
        if self._format is None:  # pragma: no cover - the pipeline always prepares first
            raise RuntimeError("BackendTemplateFormat used before prepare()")
        return self._tool_use if tools and self._tool_use is not None else self._format

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt:
        return self._ready(bool(conv.tools)).render(conv, params)

    def parser(self, prompt: Prompt, prompt_tokens: int) -> EventParser:
        return self._ready(bool(prompt.tools)).parser(prompt, prompt_tokens)

    def answer_watch(self, prompt: Prompt) -> TemplateAnswerWatch | None:
        return self._ready(bool(prompt.tools)).answer_watch(prompt)
