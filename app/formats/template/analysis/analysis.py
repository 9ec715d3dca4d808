"""Differential analysis of a chat template: reasoning, content and tool-call markers.

``analyze(source)`` runs the comparisons of llama.cpp's auto-parser (see
``tests/fixtures/templates/SOURCES.md`` for the templates it is tested on):

* R1 assistant message with / without ``reasoning_content`` → reasoning start / end;
  R2 generation prompt with ``enable_thinking`` false / true → forced-open / closed;
  R3 reasoning + content vs reasoning + tool calls → reasoning only with tools.
* C1 content-only output: markers around the content → always wrapped; wrapped only
  next to reasoning → wrapped with reasoning.
* T1..T7 tool calls (:mod:`app.formats.template.analysis.tools`).

Only JSON detection is heuristic; the workarounds (:mod:`app.formats.template.analysis.workarounds`)
are explicit, recorded in the result, and each is tested.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import fields, replace

from app.formats.template.analysis import probe as pr
from app.formats.template.analysis.diff import diff_split, leading_marker, segmentize, trailing_marker
from app.formats.template.analysis.result import (
    ContentAnalysis,
    ContentMode,
    ReasoningAnalysis,
    ReasoningMode,
    TemplateAnalysis,
)
from app.formats.template.analysis.tools import ToolAnalysis, analyze_tools
from app.formats.template.analysis.workarounds import apply_workarounds
from app.formats.template.env import FROZEN_CLOCK


def _around(text: str, needle: str) -> tuple[str, str] | None:
    if needle not in text:
        return None
    i = text.index(needle)
    return text[:i], text[i + len(needle):]


def _after_user(prompt: str) -> str:
    """What a generation prompt adds after the user's message."""
    i = prompt.rfind(pr.USER)
    return prompt[i + len(pr.USER):] if i >= 0 else prompt


def _reasoning(p: pr.Prober, turn_end: str) -> ReasoningAnalysis:
    # R1: with / without reasoning_content
    plain = p.full({"role": "assistant", "content": pr.CONTENT})
    with_r = p.full({"role": "assistant", "content": pr.CONTENT, "reasoning_content": pr.REASONING})
    start = end = ""
    mode = ReasoningMode.NONE
    if plain is not None and with_r is not None and pr.REASONING in with_r:
        d = diff_split(plain, with_r)
        around = _around(d.right, pr.REASONING)
        if around is not None:
            before, after = around
            start = before.strip() or trailing_marker(d.prefix)
            end = after.strip() or leading_marker(d.suffix)
            if end == pr.CONTENT or pr.CONTENT in end:
                end = ""
            if start and end:
                mode = ReasoningMode.TAG_BASED
            elif end:
                mode = ReasoningMode.DELIMITER
            elif start:
                start = ""
    # R3: reasoning visible only next to tool calls
    if mode is ReasoningMode.NONE and p.caps.supports_tools:
        tc = p.output(p.calls_message([p.call()], pr.REASONING), tools=True)
        if tc is not None and pr.REASONING in tc:
            before, after = tc.split(pr.REASONING, 1)
            start, end = trailing_marker(before), leading_marker(after)
            if end:
                mode = ReasoningMode.TOOLS_ONLY
    # R2: enable_thinking false / true on the generation prompt, compared after the last user
    # turn only (SmolLM3 also rewrites its system turn, which would drown the reasoning pair)
    off, on = p.gen_prompt(enable_thinking=False), p.gen_prompt(enable_thinking=True)
    if off is not None and on is not None and _after_user(off) != _after_user(on):
        d = diff_split(_after_user(off), _after_user(on))
        if not d.suffix.strip():
            if start and d.right.strip().endswith(start) and not d.left.strip():
                mode = ReasoningMode.FORCED_OPEN
            elif (start and end and d.left.strip().endswith(end)
                  and (d.prefix + d.right).rstrip().endswith(start)):
                mode = ReasoningMode.FORCED_CLOSED
            elif not start and not end:
                # thinking off closes an empty block: "<think></think>" vs "<think>" / ""
                segs = [s for s in segmentize(d.left.strip()) if s[0].strip()]
                if len(segs) == 2 and segs[0][1] and segs[1][1]:
                    start, end = segs[0][0], segs[1][0]
                    forced = d.right.strip() == start
                    mode = ReasoningMode.FORCED_CLOSED if forced else ReasoningMode.TAG_BASED
                elif len(segs) == 1 and segs[0][1] and (d.prefix + d.right).rstrip().endswith(
                        trailing_marker(d.prefix + d.right)) and trailing_marker(d.prefix + d.right):
                    start, end = trailing_marker(d.prefix + d.right), segs[0][0]
                    mode = ReasoningMode.FORCED_CLOSED
    elif on is not None and start and on.rstrip().endswith(start) and mode is ReasoningMode.TAG_BASED:
        mode = ReasoningMode.FORCED_OPEN
    return ReasoningAnalysis(mode, start, end)


def _content(p: pr.Prober, reasoning: ReasoningAnalysis) -> ContentAnalysis:
    out = p.output({"role": "assistant", "content": pr.CONTENT})
    if out is None or pr.CONTENT not in out:
        return ContentAnalysis()
    before, after = out.split(pr.CONTENT, 1)
    for marker in (reasoning.start, reasoning.end):
        if marker:
            before = before.replace(marker, "")
    start, end = before.strip(), after.strip()
    if start or end:
        return ContentAnalysis(ContentMode.ALWAYS_WRAPPED, start, end)
    if reasoning.mode is not ReasoningMode.NONE:
        with_r = p.output({"role": "assistant", "content": pr.CONTENT, "reasoning_content": pr.REASONING})
        if with_r is not None and pr.REASONING in with_r and pr.CONTENT in with_r:
            mid = with_r.split(pr.REASONING, 1)[1]
            before, after = mid.split(pr.CONTENT, 1)
            before = before.replace(reasoning.end, "", 1).strip()
            if before and after.strip():
                return ContentAnalysis(ContentMode.WRAPPED_WITH_REASONING, before, after.strip())
    return ContentAnalysis()


def _preserved(a: TemplateAnalysis) -> tuple[str, ...]:
    found = [a.reasoning.start, a.reasoning.end, a.content.start, a.content.end, a.turn_end,
             *a.tools.markers()]
    return tuple(dict.fromkeys(m for m in found if m))


@functools.lru_cache(maxsize=32)
def analyze(source: str) -> TemplateAnalysis:
    """Analyze a template (memoized by source text), on a frozen clock."""
    token = FROZEN_CLOCK.set(dt.datetime.now(dt.UTC).replace(microsecond=0))
    try:
        return _analyze(source)
    finally:
        FROZEN_CLOCK.reset(token)


def _analyze(source: str) -> TemplateAnalysis:

    caps = pr.probe_caps(source)
    p = pr.Prober(source, caps)
    turn_end = p.turn_end()
    turn_end_is_eos = turn_end == pr.EOS
    if turn_end_is_eos:
        turn_end = ""
    reasoning = _reasoning(p, turn_end)
    content = _content(p, reasoning)
    tools = analyze_tools(p, reasoning.start, reasoning.end) if caps.supports_tools else ToolAnalysis()
    result = TemplateAnalysis(caps, reasoning, content, tools, turn_end, turn_end_is_eos)
    result = _plausible(apply_workarounds(source, result))
    return replace(result, preserved=_preserved(result))


_NEEDLES = (pr.USER, pr.REASONING, pr.CONTENT, pr.FUN_FIRST, pr.FUN_SECOND, pr.ARG_FIRST,
            pr.ARG_SECOND, pr.VALUE_FIRST, pr.VALUE_SECOND)
MAX_MARKER = 64  # the longest marker of the 24 reference templates is 39 characters


def _implausible(part: object) -> bool:
    """A marker holding a probe's needle, or far longer than any real one: the diff took prompt
    or message text for markup (a template that is not prefix-stable, say)."""
    return any(isinstance(v, str) and (len(v) > MAX_MARKER or any(n in v for n in _NEEDLES))
               for v in (getattr(part, f.name) for f in fields(part)))  # type: ignore[arg-type]


def _plausible(a: TemplateAnalysis) -> TemplateAnalysis:
    """Drops what the analysis could not read cleanly: such reasoning or content markers are
    not used, and such tool syntax means no tools (a clear 400) rather than wrong calls."""
    if _implausible(a.reasoning):
        a = replace(a, reasoning=ReasoningAnalysis(ReasoningMode.NONE, "", ""))
    if _implausible(a.content):
        a = replace(a, content=ContentAnalysis())
    if _implausible(a.tools):
        a = replace(a, tools=ToolAnalysis())
    thinking = {a.reasoning.start, a.reasoning.end} - {""}
    if a.tools.section_start in thinking:  # a lone </think> before the calls is not their section
        a = replace(a, tools=replace(a.tools, section_start=""))
    return a
