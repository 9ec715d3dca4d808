"""Harmony (gpt-oss) prompt rendering with openai-harmony, to token ids.

Rendering to token ids (never to text) is what keeps user-supplied text from
becoming a control token: openai-harmony encodes message content as ordinary
text, so ``<|start|>`` typed by a user is the byte sequence ``<|start|>``, not
token 200006.  Everything that lands in a message *header* (tool names, the
response-format name) is validated against ``^[A-Za-z0-9_-]{1,64}$`` at ingest.

Policy (seed 002, sections 4, 9, 13, 14, 16), and where it differs from the
gpt-oss Hugging Face chat template (see ``tests/unit/render/test_harmony_golden.py``):

* system message: identity, knowledge cutoff, current date, ``Reasoning:``,
  valid channels, and the commentary-channel line when function tools are offered;
* developer message: ``# Instructions`` from *all* system / developer messages
  (joined by blank lines; the template uses only a leading one), ``# Tools`` from
  the JSON-schema tools, ``# Response Formats`` from a json_schema response format
  (the template has no response formats);
* assistant history: ``reasoning`` is rendered as an ``analysis`` message only for
  a tool-calling assistant message with no later plain assistant answer, otherwise
  dropped; ``content`` next to tool calls is a ``commentary`` preamble (the template
  renders it as analysis); each tool call becomes its own
  ``to=functions.NAME`` message with ``<|constrain|>json`` (the template writes plain
  ``json`` and supports one call per message); answers end with ``<|end|>``;
* tool results: ``functions.NAME to=assistant`` on commentary, content verbatim
  (the template JSON-quotes it);
* members of a namespace tool (``FunctionTool.namespace``) are shown in a namespace of their
  own (``## NS`` / ``namespace NS {...}``, as openai-harmony renders one) and called
  ``to=NS.NAME``;
* tool schemas are rendered by openai-harmony, which (unlike the template) puts no
  stray comma after ``// default: X`` and lays out object-typed parameters cleanly;
  instructions without tools end without the template's trailing blank line;
* ``tool_choice``: ``none`` leaves the tools out of the prompt; ``required`` and a
  named function prefill the assistant header up to ``to=functions`` (or through
  ``<|message|>`` for a named function), so the model can only continue a call.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass, replace
from typing import Any

import orjson
from openai_harmony import (
    Author,
    DeveloperContent,
    HarmonyEncoding,
    Message,
    RenderConversationConfig,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)
from openai_harmony import Conversation as HarmonyConversation
from openai_harmony import ReasoningEffort as HarmonyEffort

from app.core import conversation as m
from app.core.errors import InvalidRequest
from app.core.prompt import Prompt
from app.core.shed import shed
from app.formats.content import text_only
from app.formats.harmony.text import check_runs, check_tool_text, encode_text, min_tokens_of
from app.formats.harmony.vocab import END, MESSAGE, START, harmony_encoding

_EFFORT = {"low": HarmonyEffort.LOW, "medium": HarmonyEffort.MEDIUM, "high": HarmonyEffort.HIGH}


@dataclass(frozen=True, slots=True)
class HarmonyOptions:
    model_identity: str = "You are ChatGPT, a large language model trained by OpenAI."
    knowledge_cutoff: str = "2024-06"
    current_date: str | None = None  # None: today's date (UTC)
    default_reasoning_effort: m.ReasoningEffort = "medium"


def _system(opts: HarmonyOptions, effort: m.ReasoningEffort, builtins: frozenset[str] = frozenset(),
            tools: tuple[m.FunctionTool, ...] = ()) -> Message:
    """The system message; ``builtins`` (``browser``, ``python``): gpt-oss's built-in tools the
    gateway runs, in the system message's ``# Tools`` as openai-harmony writes them; another
    built-in of ``tools`` (``file_search``) is a namespace of its functions there, after them."""
    date = opts.current_date or dt.datetime.now(dt.UTC).date().isoformat()
    content = (
        SystemContent.new()
        .with_model_identity(opts.model_identity)
        .with_knowledge_cutoff(opts.knowledge_cutoff)
        .with_conversation_start_date(date)
        .with_reasoning_effort(_EFFORT[effort])
        .with_required_channels(["analysis", "commentary", "final"])
    )
    if "browser" in builtins:
        content = content.with_browser_tool()
    if "python" in builtins:
        content = content.with_python_tool()
    others: dict[str, list[ToolDescription]] = {}
    for t in tools:
        if t.builtin is not None and t.builtin not in ("browser", "python"):
            others.setdefault(t.builtin, []).append(ToolDescription.new(
                t.name.removeprefix(f"{t.builtin}__"), t.description or "", parameters=t.parameters or None))
    for name, members in others.items():
        content = content.with_tools(ToolNamespaceConfig(name=name, tools=members))
    return Message.from_role_and_content(Role.SYSTEM, content)


SLOT = "\ue000"  # stands for long instructions while openai-harmony renders the message
LONG_INSTRUCTIONS = 4096  # longer instructions are encoded by encode_text (in short calls)


def developer_message(instructions: str, tools: tuple[m.FunctionTool, ...], *,
                      slot: bool = False) -> Message | None:
    """The Harmony developer message (``# Instructions``, ``# Tools``), or None if empty; a
    run in them that openai-harmony cannot encode in bounded time is a 400.  With ``slot``,
    :data:`SLOT` stands for the instructions (the first occurrence in the message's text):
    openai-harmony encodes one call's text at once, holding the GIL (1 MB: 0.3 s)."""
    if not instructions and not tools:
        return None
    tools = tuple(t for t in tools if t.builtin is None)  # built-ins are in the system message
    if not instructions and not tools:
        return None
    check_runs(instructions, "instructions")
    check_tool_text(tools)
    content = DeveloperContent.new()
    if instructions:
        content = content.with_instructions(SLOT if slot else instructions)
    plain = [t for t in tools if t.recipient.startswith("functions.")]
    if plain:
        content = content.with_function_tools([
            ToolDescription.new(t.name, t.description or "", parameters=t.parameters or None)
            for t in plain
        ])
    namespaces: dict[str, list[ToolDescription]] = {}
    for t in tools:
        if not t.recipient.startswith("functions."):
            space, short = t.recipient.split(".", 1)
            namespaces.setdefault(space, []).append(
                ToolDescription.new(short, t.description or "", parameters=t.parameters or None))
    for space, members in namespaces.items():  # "## NAME" + "namespace NAME {...}", as OpenAI's
        content = content.with_tools(ToolNamespaceConfig(name=space, tools=members))
    return Message.from_role_and_content(Role.DEVELOPER, content)


def _text_only(msg: m.Message, index: int) -> str:
    content = msg.content
    if len(content) == 1 and type(content[0]) is m.TextPart:  # the common case, without a scan
        return content[0].text
    return text_only(msg, index, "This model's prompt format (harmony)")


@dataclass(frozen=True, slots=True)
class _Text:
    """A history message as the text message openai-harmony would be given (all of them are):
    rendered from its cached frame without building openai-harmony's pydantic ``Message``
    (three models a message: 100,000 messages took ~2 s of a 3.4 s render)."""

    role: Role
    text: str
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    name: str | None = None

    def message(self) -> Message:
        """The openai-harmony message this stands for."""
        out = Message.from_author_and_content(Author(role=self.role, name=self.name), self.text)
        out = out.with_channel(self.channel) if self.channel is not None else out
        out = out.with_recipient(self.recipient) if self.recipient is not None else out
        return out.with_content_type(self.content_type) if self.content_type is not None else out


def _has_later_answer(messages: tuple[m.Message, ...], index: int) -> bool:
    return any(x.role == "assistant" and not x.tool_calls for x in messages[index + 1:])


def _code(arguments: str) -> str:
    """A built-in ``python`` call's code: ``{"code": ...}`` as stored, or the text itself."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return str(value["code"]) if isinstance(value, dict) and isinstance(value.get("code"), str) else arguments


def _history(conv: m.Conversation) -> tuple[str, list[Message]]:
    """The instructions and the history as openai-harmony messages (:func:`_texts`)."""
    instructions, texts = _texts(conv)
    return instructions, [t.message() for t in texts]


def _texts(conv: m.Conversation) -> tuple[str, list[_Text]]:
    instructions: list[str] = []
    out: list[_Text] = []
    call_names: dict[str, str] = {}  # call id -> the recipient it was sent to
    recipients = {t.name: t.recipient for t in conv.tools}
    builtin = {t.name for t in conv.tools if t.builtin}  # gpt-oss calls these in analysis
    channels: dict[str, str] = {}  # call id -> the channel of the call (and of its output)
    msgs = conv.messages
    for i, msg in enumerate(msgs):
        if msg.role in ("system", "developer"):
            text = _text_only(msg, i)
            check_runs(text, msg.source or f"messages[{i}]")  # openai-harmony encodes it itself
            if text:
                instructions.append(text)
        elif msg.role == "user":
            out.append(_Text(Role.USER, _text_only(msg, i)))
        elif msg.role == "assistant":
            text = _text_only(msg, i)
            if msg.tool_calls:
                if msg.reasoning and not _has_later_answer(msgs, i):
                    out.append(_Text(Role.ASSISTANT, msg.reasoning, "analysis"))
                if text:
                    out.append(_Text(Role.ASSISTANT, text, "commentary"))
                for call in msg.tool_calls:
                    call_names[call.id] = recipients.get(call.name, f"functions.{call.name}")
                    channels[call.id] = "analysis" if call.name in builtin else "commentary"
                    if call_names[call.id] == "python":  # the built-in takes the code itself
                        out.append(_Text(Role.ASSISTANT, _code(call.arguments), "analysis", "python"))
                        continue
                    out.append(_Text(Role.ASSISTANT, call.arguments, channels[call.id],
                                     call_names[call.id], "<|constrain|>json"))
            else:
                out.append(_Text(Role.ASSISTANT, text, "final"))
        else:  # tool
            name = call_names.get(msg.tool_call_id or "")
            if name is None:
                raise InvalidRequest("Tool message does not answer a known tool call.",
                                     param=f"messages[{i}].tool_call_id")
            channel = channels.get(msg.tool_call_id or "", "commentary")
            out.append(_Text(Role.TOOL, _text_only(msg, i), channel, "assistant", name=name))
    return "\n\n".join(instructions), out


def response_format_section(rf: m.ResponseFormat) -> str:
    """The developer message's ``# Response Formats`` section (seed 002)."""
    text = f"# Response Formats\n\n## {rf.name}\n\n"
    if rf.description:
        text += f"// {' '.join(rf.description.splitlines())}\n"
    return text + json.dumps(rf.schema, separators=(",", ":"), ensure_ascii=False)


def _response_format_ids(enc: HarmonyEncoding, rf: m.ResponseFormat, lead: str) -> list[int]:
    # Client text (schema, names, descriptions): special-token text such as "<|start|>" is
    # encoded as ordinary characters, never refused and never a control token.
    return encode_text(enc, lead + response_format_section(rf))


def _splice_response_format(enc: HarmonyEncoding, ids: list[int],
                            rf: m.ResponseFormat) -> list[int]:
    """Insert ``# Response Formats`` at the end of the developer message (token level)."""
    dev_start = ids.index(START, 1)  # message 0 is the system message
    end = ids.index(END, dev_start)
    # A developer message with no other content gets no leading blank line.
    extra = _response_format_ids(enc, rf, "" if ids[end - 1] == MESSAGE else "\n\n")
    return ids[:end] + extra + ids[end:]


def _fill_slot(enc: HarmonyEncoding, ids: list[int], instructions: str) -> list[int]:
    """The developer message's text with the instructions in place of :data:`SLOT`, encoded in
    short calls (the ids openai-harmony gives for the whole text:
    ``tests/unit/formats/harmony/test_render.py``)."""
    body = ids.index(MESSAGE, ids.index(START, 1)) + 1  # message 0 is the system message
    end = ids.index(END, body)
    text = enc.decode_utf8(ids[body:end]).replace(SLOT, instructions, 1)
    return [*ids[:body], *encode_text(enc, text), *ids[end:]]


def prefill_ids(enc: HarmonyEncoding, choice: m.ToolChoice,
                tools: tuple[m.FunctionTool, ...] = ()) -> list[int]:
    """Assistant-header tokens that force a function call (empty for auto / none)."""
    if choice.mode != "required":
        return []
    recipients = {t.name: t.recipient for t in tools}
    # Stop before the '.': o200k's pre-tokenizer glues it to the name (".get", "_weather"),
    # so a prefill ending in a bare '.' would be a token sequence the model never saw; with
    # namespaced tools on offer, stop after "to=" ('=' is a token of its own).
    allowed = [n for n in recipients if choice.allowed is None or n in choice.allowed]
    spaced = any(not recipients[n].startswith("functions.") for n in allowed)
    header = "<|channel|>commentary to=" + ("" if spaced else "functions")
    if choice.allowed is not None and len(choice.allowed) == 1:
        name = choice.allowed[0]
        header = f"<|channel|>commentary to={recipients.get(name, 'functions.' + name)}"
        header += " <|constrain|>json<|message|>"
    specials = {"<|channel|>", "<|constrain|>", "<|message|>"}
    return list(enc.encode(header, allowed_special=specials))


_PREFIXES: dict[tuple[Any, ...], tuple[int, ...]] = {}
_PREFIXES_MAX = 512  # distinct (system, developer) prefixes kept; cleared when full


def _prefix_ids(enc: HarmonyEncoding, opts: HarmonyOptions, effort: m.ReasoningEffort,
                instructions: str, tools: tuple[m.FunctionTool, ...],
                rf: m.ResponseFormat | None) -> tuple[int, ...]:
    """The system and developer messages as token ids, cached: they repeat across requests
    (the same options, instructions and tools every turn of an agent), and rendering them
    through openai-harmony is most of a request's render time."""
    date = opts.current_date or dt.datetime.now(dt.UTC).date().isoformat()
    key = (opts, date, effort, instructions,
           orjson.dumps([(t.name, t.description, t.parameters, t.namespace, t.builtin) for t in tools]),
           None if rf is None else (rf.name, rf.description, orjson.dumps(rf.schema)))
    ids = _PREFIXES.get(key)
    if ids is None:
        builtins = frozenset(t.builtin for t in tools if t.builtin)
        messages = [_system(replace(opts, current_date=date), effort, builtins, tools)]
        long = len(instructions) > LONG_INSTRUCTIONS
        dev = developer_message(instructions, tools, slot=long)
        if dev is None and rf is not None:  # the response format needs a developer message
            dev = Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new())
        if dev is not None:
            messages.append(dev)
        # As a conversation: the system message says where tool calls go when the developer
        # message has tools, which rendering the messages one by one would not.
        rendered = enc.render_conversation(HarmonyConversation.from_messages(messages),
                                           RenderConversationConfig(auto_drop_analysis=False))
        if long:
            rendered = _fill_slot(enc, rendered, instructions)
        if rf is not None:
            rendered = _splice_response_format(enc, rendered, rf)
        ids = tuple(rendered)
        if len(_PREFIXES) >= _PREFIXES_MAX:
            _PREFIXES.clear()
        _PREFIXES[key] = ids
    return ids


def _message_ids(enc: HarmonyEncoding, message: _Text) -> list[int]:
    """One history message as token ids: its cached frame (openai-harmony's render of the
    message with empty text: header, ``<|message|>``, end) around its text encoded as ordinary
    text (special-token text stays characters): the ids openai-harmony's ``render`` gives
    (``tests/unit/formats/harmony/test_render_cache.py``) at a few µs instead of ~130 µs a
    message, which for an agent's history is most of a request's CPU; it also keeps a long
    run out of openai-harmony's superlinear encoder (harmony/text.py)."""
    if message.name is None and message.recipient is None and message.content_type is None:
        frame = _header_ids(enc, message.role, message.channel)
        return [*frame, *encode_text(enc, message.text), END]
    frame = _frame_ids(enc, message.role, message.name, message.recipient, message.channel,
                       message.content_type)
    return [*frame[:-1], *encode_text(enc, message.text), frame[-1]]


@functools.lru_cache(maxsize=4096)
def _frame_ids(enc: HarmonyEncoding, role: Role, name: str | None, recipient: str | None,
               channel: str | None, content_type: str | None) -> tuple[int, ...]:
    """A text message with empty text as openai-harmony renders it: header, ``<|message|>``, end."""
    empty = Message.from_author_and_content(Author(role=role, name=name), "")
    if channel is not None:
        empty = empty.with_channel(channel)
    if recipient is not None:
        empty = empty.with_recipient(recipient)
    if content_type is not None:
        empty = empty.with_content_type(content_type)
    return tuple(enc.render(empty))


@functools.cache
def _header_ids(enc: HarmonyEncoding, role: Role, channel: str | None) -> tuple[int, ...]:
    """``<|start|>{role}[<|channel|>{channel}]<|message|>`` as openai-harmony renders it."""
    empty = Message.from_role_and_content(role, "")
    ids = enc.render(empty.with_channel(channel) if channel is not None else empty)
    assert ids[-1] == END, ids
    return tuple(ids[:-1])


@functools.cache
def _constants(enc: HarmonyEncoding) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(``<|start|>assistant``, the stop tokens of assistant actions)."""
    start = enc.render_conversation_for_completion(HarmonyConversation.from_messages([]),
                                                   Role.ASSISTANT)
    return tuple(start), tuple(enc.stop_tokens_for_assistant_actions())


def min_prompt_tokens(conv: m.Conversation, tools: bool = False) -> int:
    """Fewer tokens than :func:`render_harmony` gives for ``conv`` (every message's text is in
    the prompt; :func:`~app.formats.harmony.text.min_tokens`), counted without encoding;
    ``tools`` (they are rendered: ``tool_choice`` is not ``none``): function tools'
    descriptions too, which openai-harmony encodes in one call (14 MB: ~20 s holding the GIL)."""
    described = sum(len(t.description or "") for t in conv.tools if t.builtin is None) if tools else 0
    return min_tokens_of(described + sum(len(p.text) for msg in conv.messages for p in msg.content
                                         if isinstance(p, m.TextPart)))


def render_harmony(conv: m.Conversation, params: m.GenerationParams,
                   opts: HarmonyOptions | None = None) -> Prompt:
    """The prompt as token ids: the cached system / developer prefix, each history message
    rendered by openai-harmony, and ``<|start|>assistant`` (the same ids as rendering the
    whole conversation for completion: ``tests/unit/formats/harmony`` checks it)."""
    opts = opts or HarmonyOptions()
    enc = harmony_encoding()
    # ``allowed`` narrows what may be *called* (enforced by prefill and the pipeline's tool
    # guard), not what the model sees: all tools stay in the prompt, which keeps it cacheable.
    tools = conv.tools if params.tool_choice.mode != "none" else ()
    instructions, history = _texts(conv)
    effort = params.reasoning_effort or opts.default_reasoning_effort
    start, stops = _constants(enc)
    ids = [*_prefix_ids(enc, opts, effort, instructions, tools, conv.response_format),
           *(t for message in history for t in _message_ids(enc, message)), *start]
    prefill = prefill_ids(enc, params.tool_choice, tools)
    ids += prefill
    token_ids = tuple(ids)  # one copy (``(*ids, *prefill)`` made two: ~10 ms of GIL for 700,000 ids)
    shed(history)  # a long history's lists freed in pieces, not in one dealloc (100,000 messages:
    shed(ids)  # ~9 ms holding the GIL, a stall of the event loop while this runs in a thread)
    return Prompt(token_ids=token_ids, stop_token_ids=stops, prefill_ids=tuple(prefill), tools=tools)
