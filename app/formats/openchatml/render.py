"""OpenChatML 2.2 prompt rendering, to text (and trusted / untrusted segments).

The prompt is a transcript: the YAML document header of spec §2, then messages in the
canonical 2.2 form, then the generation prompt ``<|start|>assistant``::

    <|start|>system<|message|>…<|end|>
    <|start|>developer<|message|># Instructions … # Tools …<|end|>
    <|start|>user<|message|>…<|end|>
    <|start|>assistant<|channel|>analysis<|message|>…<|end|>          (pending call only)
    <|start|>assistant intent=preamble<|channel|>commentary<|message|>…<|end|>
    <|start|>assistant to=functions.NAME call_id=ID<|channel|>commentary<|constrain|>json<|message|>…<|call|>
    <|start|>tool name=functions.NAME call_id=ID to=assistant<|channel|>commentary<|message|>…<|end|>
    <|start|>assistant<|channel|>final<|message|>…<|end|>
    <|start|>assistant

The message policy is the Harmony renderer's (:mod:`app.formats.harmony.render`, HIP-1 §12):
system / developer texts become the developer ``# Instructions``; reasoning is kept
only before a still-unanswered tool call (§7, §12.7); answers in history end with
``<|end|>``; ``tool_choice`` ``none`` drops the tools, ``required`` prefills the
assistant header up to `` to=functions`` (through ``<|message|>`` for a named function).

Text-transport safety (§3, §11): every client string goes through
:func:`escape_untrusted`, so no control-token sequence can come from the client; names
and call ids that land in headers are validated (or, for call ids, aliased).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, replace

from app.core.conversation import (
    Conversation,
    FunctionTool,
    GenerationParams,
    Message,
    ReasoningEffort,
    ToolChoice,
)
from app.core.errors import InvalidRequest
from app.core.prompt import Prompt
from app.formats.content import text_only
from app.formats.harmony.render import SLOT, developer_message, response_format_section
from app.formats.harmony.vocab import harmony_encoding

STOP_STRINGS = ("<|return|>", "<|call|>")
_ZWSP = "\u200b"
_UNSAFE_LT = re.compile(r"<(?=[|\u200b]|\Z)")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CALL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


@dataclass(frozen=True, slots=True)
class OpenChatMLOptions:
    model: str | None = None  # the header's informative ``model:``
    model_identity: str = "You are ChatGPT, a large language model trained by OpenAI."
    knowledge_cutoff: str = "2024-06"
    current_date: str | None = None  # None: today's date (UTC)
    default_reasoning_effort: ReasoningEffort = "medium"
    harmony_profile: bool = True  # declare HIP-1 (channels required) in the header
    document_header: bool = True


def escape_untrusted(text: str) -> str:
    """Make client text inert: a zero-width space goes after every ``<`` that is followed
    by ``|``, by a zero-width space, or by the end of the text.

    The result contains no ``<|`` at all, so no control token (nor a doubled-``<`` escape
    of the next trusted token) can form, inside the text or where it meets the
    template's markup.  The mapping is injective (a ZWSP already after ``<`` gets another
    one), so nothing the client wrote is lost; the spec's own ``<<|x|>`` escape and
    ``<|literal|>`` blocks are not used because both still contain the token's bytes,
    which a tokenizer with special-token parsing would turn into the token."""
    return _UNSAFE_LT.sub("<" + _ZWSP, text)


def _check_name(name: str, param: str) -> str:
    if not _NAME.match(name):
        raise InvalidRequest(f"Invalid name {name!r}: names must match ^[A-Za-z0-9_.-]{{1,64}}$.",
                             param=param, code="invalid_name")
    return name


def _text_only(msg: Message, index: int) -> str:
    return text_only(msg, index, "This model's prompt format (openchatml)")


class _Builder:
    def __init__(self) -> None:
        self.segments: list[tuple[str, bool]] = []

    def trusted(self, text: str) -> None:
        self.segments.append((text, True))

    def message(self, header: str, body: str, end: str = "<|end|>") -> None:
        self.trusted(f"<|start|>{header}<|message|>")
        if body:
            self.segments.append((escape_untrusted(body), False))
        self.trusted(end)


def _yaml_header(opts: OpenChatMLOptions, params: GenerationParams,
                 effort: ReasoningEffort) -> str:
    lines = ["version: 2.2"]
    if opts.model:
        lines.append(f"model: {escape_untrusted(json.dumps(opts.model))}")
    lines.append("generation_settings:")
    if params.temperature is not None:
        lines.append(f"  temperature: {params.temperature!r}")
    lines.append(f'  reasoning_effort: "{effort}"')
    if opts.harmony_profile:
        lines += ["profiles:", "  harmony:", "    enabled: true",
                  '    require_channels: ["analysis","commentary","final"]',
                  '    tool_calls_in: "commentary"']
    return "\n".join(lines) + "\n"


def _system_text(opts: OpenChatMLOptions, effort: ReasoningEffort, tools: bool) -> str:
    date = opts.current_date or dt.datetime.now(dt.UTC).date().isoformat()
    text = (f"{opts.model_identity}\nKnowledge cutoff: {opts.knowledge_cutoff}\n"
            f"Current date: {date}\n\nReasoning: {effort}\n\n# Valid channels: analysis, "
            "commentary, final. Channel must be included for every message.")
    if tools:
        text += "\nCalls to these tools must go to the commentary channel: 'functions'."
    return text


def _developer_text(instructions: str, conv: Conversation,
                    tools: tuple[FunctionTool, ...]) -> str:
    text = ""
    # gpt-oss's built-ins run by the gateway (browser, python, file_search) have no system-message
    # form here: each is shown as the plain function the model calls (to=functions.NAME)
    tools = tuple(replace(t, namespace=None, builtin=None) if t.builtin else t for t in tools)
    dev = developer_message(instructions, tools, slot=True)  # long instructions: never encoded
    if dev is not None:
        enc = harmony_encoding()
        rendered = enc.decode_utf8(enc.render(dev))
        text = rendered.removeprefix("<|start|>developer<|message|>").removesuffix("<|end|>")
        text = text.replace(SLOT, instructions, 1)
    if conv.response_format is not None:
        section = response_format_section(conv.response_format)
        text = f"{text}\n\n{section}" if text else section
    return text


def _call_ids(conv: Conversation) -> dict[str, str]:
    """Client call ids as written into headers: safe ones as they are, others aliased."""
    ids = [c.id for msg in conv.messages for c in msg.tool_calls]
    used = {i for i in ids if _CALL_ID.match(i)}
    out: dict[str, str] = {}
    n = 0
    for call_id in ids:
        if call_id in out:
            continue
        if call_id in used:
            out[call_id] = call_id
            continue
        while f"call_ocm{n}" in used:
            n += 1
        out[call_id] = f"call_ocm{n}"
        used.add(out[call_id])
    return out


def _history(b: _Builder, conv: Conversation) -> None:
    ids = _call_ids(conv)
    names: dict[str, str] = {}
    msgs = conv.messages
    for i, msg in enumerate(msgs):
        if msg.role in ("system", "developer"):
            continue
        text = _text_only(msg, i)
        if msg.role == "user":
            b.message("user", text)
        elif msg.role == "assistant" and msg.tool_calls:
            later_answer = any(x.role == "assistant" and not x.tool_calls for x in msgs[i + 1:])
            if msg.reasoning and not later_answer:
                b.message("assistant<|channel|>analysis", msg.reasoning)
            if text:
                b.message("assistant intent=preamble<|channel|>commentary", text)
            for j, call in enumerate(msg.tool_calls):
                name = _check_name(call.name, f"messages[{i}].tool_calls[{j}].function.name")
                names[call.id] = name
                constrain = "<|constrain|>json" if _is_json(call.arguments) else ""
                b.message(f"assistant to=functions.{name} call_id={ids[call.id]}"
                          f"<|channel|>commentary{constrain}", call.arguments, "<|call|>")
        elif msg.role == "assistant":
            b.message("assistant<|channel|>final", text)
        else:
            answered = names.get(msg.tool_call_id or "")
            if answered is None:
                raise InvalidRequest("Tool message does not answer a known tool call.",
                                     param=f"messages[{i}].tool_call_id")
            b.message(f"tool name=functions.{answered} call_id={ids[msg.tool_call_id or '']} "
                      "to=assistant<|channel|>commentary", text)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def prefill_text(choice: ToolChoice) -> str:
    """Assistant-header text that forces a function call (empty for auto / none)."""
    if choice.mode != "required":
        return ""
    if choice.allowed is not None and len(choice.allowed) == 1:
        name = _check_name(choice.allowed[0], "tool_choice")
        return f" to=functions.{name}<|channel|>commentary<|constrain|>json<|message|>"
    return " to=functions"


def render_openchatml(conv: Conversation, params: GenerationParams,
                      options: OpenChatMLOptions | None = None) -> Prompt:
    opts = options or OpenChatMLOptions()
    tools = conv.tools if params.tool_choice.mode != "none" else ()
    for k, tool in enumerate(conv.tools):
        _check_name(tool.name, f"tools[{k}].function.name")
    if conv.response_format is not None:
        _check_name(conv.response_format.name, "response_format.json_schema.name")
    effort = params.reasoning_effort or opts.default_reasoning_effort
    b = _Builder()
    if opts.document_header:
        b.segments.append((_yaml_header(opts, params, effort), True))
    b.message("system", _system_text(opts, effort, bool(tools)))
    instructions = "\n\n".join(
        t for i, msg in enumerate(conv.messages) if msg.role in ("system", "developer")
        if (t := _text_only(msg, i)))
    developer = _developer_text(instructions, conv, tools)
    if developer:
        b.message("developer", developer)
    _history(b, conv)
    prefill = prefill_text(params.tool_choice)
    b.trusted("<|start|>assistant" + prefill)
    segments = tuple(b.segments)
    return Prompt(token_ids=None, text="".join(t for t, _ in segments),
                    stop_strings=STOP_STRINGS, segments=segments, prefill_text=prefill)
