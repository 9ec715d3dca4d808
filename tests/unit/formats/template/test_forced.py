"""A forced call on every shared chat template with tool syntax (``app/formats/template/forced.py``).

For each template in ``tests/fixtures/templates`` whose analysis found a call syntax, the
prompt for ``tool_choice`` required / a named function must end with the call's opening, and
what the template itself renders for that call after the opening (the continuation a model
trained on it writes) must parse, after the prefill, as exactly that call.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
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
    if not core.strip():  # bare JSON calls: from the call's "{" on
        return text[text.rfind("{", 0, text.rfind('"get_weather"')):]
    at = text.rfind(core.strip())
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
    json_call = analyze(source).tools.format is ToolFormat.JSON_NATIVE
    if prompt.prefill_text:
        assert prompt.segments[-1] == (prompt.prefill_text, True)
    else:  # a bare-JSON template (Llama 3.2): nothing to open, the JSON is constrained
        assert json_call and prompt.json_schema is not None
    rest = _continuation(source, prompt.prefill_text)
    if prompt.json_schema is not None:  # what the model may write: the template's own call JSON
        value, _ = json.JSONDecoder().raw_decode(rest.lstrip())
        jsonschema.validate(value, prompt.json_schema)
        names = {"get_weather"} if named else {"get_weather", "get_time"}
        assert json.dumps(prompt.json_schema).count('"const"') == len(names)
    parser = fmt.parser(prompt, 10)
    assert isinstance(parser, TextEventParser)
    events = parser.feed(Chunk(text=rest)) + parser.feed(Chunk(finish=Finish("stop"))) + parser.close()
    started = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [e.name for e in started] == ["get_weather"], (prompt.prefill_text, rest, events)
    assert json.loads(done[0].arguments) == {"city": "Paris"}, events
    assert not [e for e in events if isinstance(e, ev.Error)], events
