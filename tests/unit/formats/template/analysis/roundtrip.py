"""Round-trip helper: render an assistant message through a template, parse it back.

The rendered assistant part is the render with the message minus its common prefix
with the generation prompt (what the model would have continued from), cut at the
end-of-turn marker (the backend's EOS, not text).  It is fed to the analysis-built
decoder in seeded random chunkings.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass

from app.core import events as ev
from app.core.conversation import Conversation, FunctionTool, Message, TextPart, ToolCall
from app.formats.template.analysis.analysis import analyze
from app.formats.template.analysis.diff import common_prefix_len, open_marker_start
from app.formats.template.env import FROZEN_CLOCK
from app.formats.template.parse import TemplateDecoder
from app.formats.template.render import render_segments, segments_text
from tests.support.paths import FIXTURES

TEMPLATES = FIXTURES / "templates"
TOOLS = (
    FunctionTool("get_weather", "Weather <b>now</b>", {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "code": {"type": "string"}}, "required": ["city"]}),
    FunctionTool("get_time", "Time", {"type": "object", "properties": {"zone": {"type": "string"}}}),
)
EOS = "</s>"
USER = Message("user", (TextPart("What is the weather in Paris?"),))
REASONING = "The user wants the weather.\nI should call the tool."
CONTENT = "Let me check that for you."
CALLS = (("get_weather", {"city": "Paris, France", "days": 3, "code": "75"}), ("get_time", {"zone": "CET"}))


@dataclass(frozen=True)
class Parsed:
    reasoning: str
    content: str
    calls: tuple[tuple[str, dict[str, object]], ...]
    finish: str | None
    errors: tuple[str, ...]


VARIANTS: dict[str, str] = {}  # name → template source, for templates made in a test


def template_source(name: str) -> str:
    return VARIANTS[name] if name in VARIANTS else (TEMPLATES / f"{name}.jinja").read_text()


def ids_for(name: str) -> tuple[str, str]:
    if name.startswith("Kimi"):  # Kimi reads the function name out of the call id
        return "functions.get_weather:0", "functions.get_time:1"
    return "A1b2C3d4E", "F5g6H7i8J"  # Mistral wants 9 alphanumerics


def message(name: str, n_calls: int) -> Message:
    ids = ids_for(name)
    calls = tuple(ToolCall(ids[i], fn, json.dumps(args)) for i, (fn, args) in enumerate(CALLS[:n_calls]))
    return Message("assistant", (TextPart(CONTENT),), tool_calls=calls, reasoning=REASONING)


def rendered_part(name: str, msg: Message) -> tuple[str, str]:
    """(prompt text the model continues from, the assistant part it would write)."""
    source = template_source(name)
    a = analyze(source)
    # One clock for both renders: templates that print the time (firefunction: seconds) must
    # not differ between them when a second boundary falls in between.
    token = FROZEN_CLOCK.set(dt.datetime.now(dt.UTC).replace(microsecond=0))
    try:
        prompt = segments_text(render_segments(source, Conversation((USER,), TOOLS), caps=a.caps,
                                               bos_token="<s>", eos_token=EOS))
        full = segments_text(render_segments(source, Conversation((USER, msg), TOOLS), caps=a.caps,
                                             add_generation_prompt=False, bos_token="<s>",
                                             eos_token=EOS))
    finally:
        FROZEN_CLOCK.reset(token)
    n = common_prefix_len(prompt, full)
    if (cut := open_marker_start(prompt[:n])) >= 0:  # the prompt and the answer share a "<"
        n = cut
    out = full[n:]
    end = EOS if a.turn_end_is_eos else a.turn_end
    if end and end in out:
        out = out[:out.rindex(end)]
    return prompt[:n], out


def parse(name: str, prompt: str, text: str, seed: int | None) -> Parsed:
    a = analyze(template_source(name))
    dec = TemplateDecoder(a, TOOLS, prompt, eos_token=EOS)
    rnd = random.Random(seed)
    events: list[ev.Event] = []
    i = 0
    while i < len(text):
        k = len(text) if seed is None else rnd.randint(1, 9)
        events += dec.decode(text[i:i + k])
        i += k
    tail, finish = dec.flush("eos")
    events += tail
    return Parsed(
        "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta)),
        "".join(e.text for e in events if isinstance(e, ev.TextDelta)),
        tuple((e.name, json.loads(e.arguments)) for e in events if isinstance(e, ev.ToolCallDone)),
        finish, tuple(e.code for e in events if isinstance(e, ev.Error)))
