"""A forced call on every shared chat template with tool syntax (``app/formats/template/forced.py``).

For each template in ``tests/fixtures/templates`` whose analysis found a call syntax, the
prompt for ``tool_choice`` required / a named function must end with the call's opening, and
what the template itself renders for that call after the opening (the continuation a model
trained on it writes) must parse, after the prefill, as exactly that call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core import events as ev
from app.core.conversation import (
    Conversation,
    FunctionTool,
    GenerationParams,
    Message,
    TextPart,
    ToolCall,
    ToolChoice,
)
from app.core.output import Chunk, Finish
from app.formats.catalog import TemplateFormat
from app.formats.parsing.text import TextEventParser
from app.formats.template.analysis.analysis import analyze
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.render import render_segments, segments_text
from tests.support.paths import FIXTURES

TEMPLATES = sorted((FIXTURES / "templates").glob("*.jinja"))
WITH_CALLS = [p for p in TEMPLATES if analyze(p.read_text()).tools.format is not ToolFormat.NONE]
WEATHER = FunctionTool("get_weather", "Weather for a city.",
                       {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
TIME = FunctionTool("get_time", "The time.", {"type": "object", "properties": {}})
USER = Message("user", (TextPart("Weather in Paris?"),))


def test_most_shared_templates_have_a_call_syntax() -> None:
    assert len(TEMPLATES) == 24 and len(WITH_CALLS) >= 18, [p.name for p in WITH_CALLS]


def _continuation(source: str, prefill: str) -> str:
    """What the template renders for get_weather({"city": "Paris"}) after the prefill's call part."""
    a = analyze(source)
    call_id = "abcDEF123" if a.tools.ids_rendered else "functions.get_weather:0"  # Kimi: the id is the name
    call = Message("assistant", (), tool_calls=(ToolCall(call_id, "get_weather", '{"city": "Paris"}'),))
    conv = Conversation((USER, call), (WEATHER, TIME))
    text = segments_text(render_segments(source, conv, add_generation_prompt=False, caps=a.caps))
    core = prefill.removeprefix(a.reasoning.end + "\n\n") if a.reasoning.end else prefill
    at = text.rfind(core.strip()) if core.strip() else -1
    assert at >= 0, (core, text[-400:])
    return text[at + len(core.strip()):]


@pytest.mark.parametrize("path", WITH_CALLS, ids=[p.stem for p in WITH_CALLS])
@pytest.mark.parametrize("named", [True, False], ids=["named", "required"])
def test_a_forced_call_is_prefilled_and_parses(path: Path, named: bool) -> None:
    source = path.read_text()
    fmt = TemplateFormat(source)
    choice = ToolChoice("required", ("get_weather",)) if named else ToolChoice("required")
    conv = Conversation((USER,), (WEATHER, TIME))
    prompt = fmt.render(conv, GenerationParams(tool_choice=choice, thinking=True))
    assert prompt.prefill_text and prompt.segments[-1] == (prompt.prefill_text, True)
    rest = _continuation(source, prompt.prefill_text)
    parser = fmt.parser(prompt, 10)
    assert isinstance(parser, TextEventParser)
    events = parser.feed(Chunk(text=rest)) + parser.feed(Chunk(finish=Finish("stop"))) + parser.close()
    started = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [e.name for e in started] == ["get_weather"], (prompt.prefill_text, rest, events)
    assert json.loads(done[0].arguments) == {"city": "Paris"}, events
    assert not [e for e in events if isinstance(e, ev.Error)], events
