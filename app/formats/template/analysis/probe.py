"""Rendering probes for the analyzer: capabilities and the assistant part of a render.

Every comparison renders a fixed conversation (one user turn) plus a variant assistant
message built from *needles* (strings that cannot be confused with template text), and
looks at the assistant part only: the render minus its common prefix with the
generation prompt, minus the end-of-turn text that follows every assistant message.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from app.core.errors import InvalidRequest
from app.formats.template.analysis.diff import common_prefix_len, leading_marker, open_marker_start
from app.formats.template.env import RenderCaps, render_raw

USER = "USER_NEEDLE_Q"
REASONING = "REASONING_NEEDLE_R"
CONTENT = "CONTENT_NEEDLE_C"
FUN_FIRST, FUN_SECOND = "first_fn", "second_fn"
ARG_FIRST, ARG_SECOND = "arg_alpha", "arg_beta"
VALUE_FIRST, VALUE_SECOND = "XXXX", "YYYY"
ID_FIRST, ID_SECOND = "call00001", "call99999"
BOS, EOS = "<BOS_TOKEN>", "<EOS_TOKEN>"


def tool_defs(flat: bool) -> list[dict[str, Any]]:
    out = []
    for name in (FUN_FIRST, FUN_SECOND):
        fn = {"name": name, "description": "Probe tool",
              "parameters": {"type": "object", "properties": {
                  ARG_FIRST: {"type": "string", "description": "first"},
                  ARG_SECOND: {"type": "string", "description": "second"}}, "required": []}}
        out.append(fn if flat else {"type": "function", "function": fn})
    return out


class Prober:
    """Renders variants of one assistant message through one template (memoized)."""

    def __init__(self, source: str, caps: RenderCaps | None = None) -> None:
        self.source = source
        self.caps = caps or RenderCaps()

    def call(self, name: str = FUN_FIRST, args: dict[str, Any] | None = None,
             call_id: str | None = ID_FIRST) -> dict[str, Any]:
        a: dict[str, Any] = {ARG_FIRST: VALUE_FIRST} if args is None else args
        d: dict[str, Any] = {"type": "function", "function": {
            "name": name, "arguments": a if self.caps.object_arguments else json.dumps(a)}}
        if call_id is not None:
            d["id"] = call_id
        return d

    def calls_message(self, calls: list[dict[str, Any]], reasoning: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"role": "assistant", "tool_calls": calls,
                             "content": None if self.caps.null_content_with_calls else ""}
        if reasoning is not None:
            d["reasoning_content"] = d["tool_plan"] = reasoning
        return d

    def render(self, messages: list[dict[str, Any]], *, tools: bool = False, agp: bool = False,
               enable_thinking: bool | None = None) -> str | None:
        key = json.dumps([messages, tools, agp, enable_thinking])
        return self._render(key)

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one Prober per analysis, short-lived
    def _render(self, key: str) -> str | None:
        messages, tools, agp, enable_thinking = json.loads(key)
        for with_tools in (tools, True):  # some templates fail without tools (firefunction)
            try:
                return render_raw(self.source, messages,
                                  tools=tool_defs(self.caps.flat_tools) if with_tools else None,
                                  add_generation_prompt=agp, enable_thinking=enable_thinking,
                                  bos_token=BOS, eos_token=EOS)
            except InvalidRequest:
                continue
        return None

    def conversation(self, assistant: dict[str, Any] | None) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": USER}]
        return [*msgs, assistant] if assistant is not None else msgs

    def gen_prompt(self, tools: bool = False, enable_thinking: bool | None = None) -> str | None:
        return self.render(self.conversation(None), tools=tools, agp=True, enable_thinking=enable_thinking)

    def full(self, assistant: dict[str, Any], tools: bool = False) -> str | None:
        return self.render(self.conversation(assistant), tools=tools)

    def split_assistant(self, full: str, tools: bool = False) -> tuple[str, str]:
        """(generation-prompt part, assistant part) of a render that ends with an assistant message.

        Compared with the generation prompt after the user's message only: a template that is
        not prefix-stable (a system turn only in the generation prompt, a tool preamble put
        before the last user message) differs earlier, which must not move the split there."""
        gp = self.gen_prompt(tools) or ""
        i, j = full.rfind(USER), gp.rfind(USER)
        at_f, at_g = (i + len(USER), j + len(USER)) if i >= 0 and j >= 0 else (0, 0)
        n = common_prefix_len(full[at_f:], gp[at_g:])
        cut = open_marker_start(full[at_f:at_f + n])
        if cut >= 0 and n < len(gp) - at_g:
            n = cut
        return full[:at_f + n], full[at_f + n:]

    def after_content(self) -> str:
        """What follows the content of a plain assistant message."""
        full = self.full({"role": "assistant", "content": CONTENT})
        if full is None or CONTENT not in full:
            return ""
        return full[full.rindex(CONTENT) + len(CONTENT):]

    def turn_end(self) -> str:
        """The end-of-turn marker: the first marker after the content that also ends user
        turns (so a content-closing marker before it is not taken), else the first one."""
        after = self.after_content()
        user = self.render(self.conversation(None)) or ""
        user_end = leading_marker(user[user.rindex(USER) + len(USER):]) if USER in user else ""
        if user_end and user_end in after:
            return user_end
        return leading_marker(after) or after.strip()

    def output(self, assistant: dict[str, Any], tools: bool = False) -> str | None:
        """The assistant part of a render, without the end-of-turn text."""
        full = self.full(assistant, tools)
        if full is None:
            return None
        out = self.split_assistant(full, tools)[1]
        end = self.turn_end()
        if end and end in out:
            out = out[:out.rindex(end)]
        return out


def probe_caps(source: str) -> RenderCaps:
    """Which data shapes the template accepts (tools wrapped or flat, arguments as objects)."""
    flat = False
    base = Prober(source)
    with_tools = base.gen_prompt(tools=True)
    if with_tools is None or FUN_FIRST not in with_tools:
        flat_p = Prober(source, RenderCaps(flat_tools=True))
        flat_out = flat_p.gen_prompt(tools=True)
        if flat_out is not None and FUN_FIRST in flat_out:
            flat, with_tools = True, flat_out
    for null_content in (False, True):
        for object_arguments in (True, False):
            caps = RenderCaps(True, False, object_arguments, flat, null_content)
            p = Prober(source, caps)
            one = p.full(p.calls_message([p.call()]), tools=True)
            if one is None or VALUE_FIRST not in one or ARG_FIRST not in one:
                continue
            two = p.full(p.calls_message([p.call(), p.call(FUN_SECOND, {ARG_SECOND: VALUE_SECOND},
                                                                 ID_SECOND)]), tools=True)
            parallel = two is not None and VALUE_SECOND in two and VALUE_FIRST in two
            return RenderCaps(True, parallel, object_arguments, flat, null_content)
    return RenderCaps(False, False, True, flat)
