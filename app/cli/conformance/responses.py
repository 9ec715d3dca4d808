"""The Open Responses compliance tests, reimplemented from the public suite's definitions.

The requests and assertions follow the public suite (openresponses/openresponses,
``src/lib/compliance-tests.ts``): 17 tests, its optional ``offline-web-search`` (run with
``--enable-offline-web-search``) and ``file-search`` (:mod:`app.cli.conformance.file_search`:
on a vector store the run makes, or ``--file-search-vector-store``), plus
``tool-calling-streaming`` (in earlier
versions of that suite) and ``file-input`` (this runner's own, the ``input_file`` twin of
``image-input``).  The suite's ``websocket-generate-false`` is left out: ``generate`` is not
in the 2026-04-24 document.  Helpers shared with the WebSocket tests live in
:mod:`app.cli.conformance.websocket`.
"""

from __future__ import annotations

import base64
from typing import Any

from app.cli.conformance.runner import Check, TestCase
from app.cli.conformance.transport import Client
from app.cli.conformance.wire import TERMINAL, check_stream

Json = dict[str, Any]

WEATHER_TOOL: Json = {
    "type": "function", "name": "get_weather", "description": "Get the current weather for a location",
    "parameters": {"type": "object", "required": ["location"], "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}}}}
# A 32x32 PNG (a red heart on white), as in the public suite's image-input test.
HEART_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAIAAAD8GO2jAAABmklEQVR42tyWAaTyUBzFew/eG4AHz+MBSAHKBiJRGFKwIgQQ"
    "JKLUIioBIhCAiCAAEizAQIAECaASqFFJq84nudjnaqvuPnxzgP9xfrq5938csPn7PwHTKSoViCIEAYEAMhmoKsU2mUCWEQqB"
    "5xEMIp/HaGQG2G6RSuH9HQ7H34rFrtPbdz4jl6PbwmEsl3QA1mt4vcRKk8dz9eg6IpF7tt9fzGY0gCgafFRFo5Blc5vLhf3e"
    "COj1yNhM5GRMVK0aATxPZoz09YXjkQDmczJgquGQAPp9WwCNBgG027YACgUC6HRsAZRKBDAY2AJoNv/ZnwzA6WScznG3p4UA"
    "ymXGAEkyXrTFAh8fLAGqagQAyGaZpYsi7bHTNPz8MEj//LxuFPo+UBS8vb0KaLXubrRa7aX0RMLCykwmn0z3+XA4WACcTpCk"
    "h9MFAZpmuVXo+mO/w+/HZvNgbblcUCxaSo/Hyck80Yu6XXDcvfVZr79cvMZjuN2U9O9vKAqjZrfbIZ0mV4TUi9Xqz6jddNy/"
    "/7+e3n8Fhf/Llo2kxi8AQyGRoDkmAhAAAAAASUVORK5CYII=")


class Context:
    """What a test needs: the client and the model under test."""

    def __init__(self, client: Client, model: str, offline_web_search: bool = False,
                 file_search_store: str | None = None) -> None:
        self.client = client
        self.model = model
        self.offline_web_search = offline_web_search
        self.file_search_store = file_search_store  # None: the file-search case makes one


def user(text: str) -> Json:
    return {"type": "message", "role": "user", "content": text}


def create(ctx: Context, check: Check, body: Json, *, stream: bool = False) -> Json | None:
    """``POST /responses``; checks the body or every event, returns the final response."""
    if not stream:
        ex = ctx.client.post("/responses", body)
        if not check.expect(ex.status == 200, f"HTTP {ex.status}: {ex.text[:200]}"):
            return None
        check.schema("ResponseResource", ex.body)
        return ex.body if isinstance(ex.body, dict) else None
    st = ctx.client.stream("/responses", {**body, "stream": True})
    if not check.expect(st.status == 200 and not st.text, f"HTTP {st.status}: {st.text[:200]}"):
        return None
    check.suite += st.problems
    check.expect(bool(st.events), "No streaming events received")
    check.events(st.events)
    check.wire(check_stream(st.events, st.sse_names))
    final = next((e.get("response") for e in reversed(st.events) if e.get("type") in TERMINAL), None)
    if not check.expect(isinstance(final, dict), "no terminal event with a response"):
        return None
    assert isinstance(final, dict)
    check.schema("ResponseResource", final, "final response: ")
    return final


def has_output(check: Check, r: Json) -> None:
    check.expect(bool(r.get("output")), "Response has no output items")


def completed(check: Check, r: Json) -> None:
    check.expect(r.get("status") == "completed", f"Expected status \"completed\" but got {r.get('status')!r}")


def has_type(check: Check, r: Json, type_: str) -> None:
    check.expect(any(i.get("type") == type_ for i in r.get("output") or []),
                 f"Expected output item of type {type_!r} but none found")


def _simple(body: Any, *, stream: bool = False, tool: bool = False) -> Any:
    def run(ctx: Context, check: Check) -> None:
        r = create(ctx, check, {"model": ctx.model, **body}, stream=stream)
        if r is None:
            return
        has_output(check, r)
        if tool:
            has_type(check, r, "function_call")
        else:
            completed(check, r)
    return run


def _phase_schema(ctx: Context, check: Check) -> None:
    """A local fixture: the document must accept assistant output messages with ``phase``."""
    def message(phase: str, text: str) -> Json:
        return {"id": f"msg_{phase}", "type": "message", "status": "completed", "role": "assistant",
                "phase": phase, "content": [{"type": "output_text", "text": text, "annotations": []}]}
    usage = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3,
             "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    r: Json = {
        "id": "resp_phase_schema", "object": "response", "created_at": 1764967971,
        "completed_at": 1764967972, "status": "completed", "incomplete_details": None, "model": ctx.model,
        "previous_response_id": None, "instructions": None,
        "output": [message("commentary", "I am checking the answer."),
                   message("final_answer", "The answer is four.")],
        "error": None, "tools": [], "tool_choice": "auto", "truncation": "disabled",
        "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1,
        "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0, "temperature": 1,
        "reasoning": {"effort": None, "summary": None}, "usage": usage, "max_output_tokens": None,
        "max_tool_calls": None, "store": True, "background": False, "service_tier": "default",
        "metadata": {}, "safety_identifier": None, "prompt_cache_key": None}
    check.schema("ResponseResource", r)
    has_output(check, r)
    completed(check, r)


def _tool_streaming(ctx: Context, check: Check) -> None:
    body = {"model": ctx.model, "input": [user("What's the weather like in San Francisco?")],
            "tools": [WEATHER_TOOL]}
    st = ctx.client.stream("/responses", {**body, "stream": True})
    if not check.expect(st.status == 200 and not st.text, f"HTTP {st.status}: {st.text[:200]}"):
        return
    check.events(st.events)
    check.wire(check_stream(st.events, st.sse_names))
    types = [e.get("type") for e in st.events]
    for t, kind in (("response.output_item.added", "function_call"), ("response.output_item.done",
                                                                        "function_call")):
        check.expect(any(e.get("type") == t and (e.get("item") or {}).get("type") == kind
                         for e in st.events), f"Missing {t} event with a {kind} item")
    for t in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
        check.expect(t in types, f"Missing {t} event")


def compact_request(model: str | None) -> Json:
    body: Json = {"prompt_cache_key": "openresponses-compact-test", "input": [
        user("We agreed to launch on Tuesday and notify support first."),
        {"type": "message", "role": "assistant",
         "content": "Understood. The launch is Tuesday, with support notified beforehand."}]}
    return body if model is None else {"model": model, **body}


def _compact(ctx: Context, check: Check) -> None:
    ex = ctx.client.post("/responses/compact", compact_request(ctx.model))
    if not check.expect(ex.status == 200, f"HTTP {ex.status} from /responses/compact: {ex.text[:160]}"):
        return
    check.schema("CompactResource", ex.body)
    body = ex.body if isinstance(ex.body, dict) else {}
    has_output(check, body)
    check.expect(body.get("object") == "response.compaction",
                 f"Expected object \"response.compaction\" but got {body.get('object')!r}")
    has_type(check, body, "compaction")


def _compact_missing_model(ctx: Context, check: Check) -> None:
    ex = ctx.client.post("/responses/compact", {"input": [user("Compact this conversation.")]})
    check.expect(ex.status in (400, 422), f"Expected HTTP 400 or 422 but got {ex.status}: {ex.text[:120]}")


def _one_page_pdf(text: str) -> bytes:
    """A one-page PDF as small generators (and the Open Responses compliance suite's own
    fixture) write it: objects, a trailer, no cross-reference table, no ``startxref``."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [b"<</Type/Catalog/Pages 2 0 R>>", b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
               b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
               b"/Resources<</Font<</F1 5 0 R>>>>>>",
               b"<</Length %d>>\nstream\n%s\nendstream" % (len(stream), stream),
               b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>"]
    body = b"".join(b"%d 0 obj\n%s\nendobj\n" % (i, o) for i, o in enumerate(objects, 1))
    return b"%PDF-1.4\n" + body + b"trailer\n<</Root 1 0 R>>\n%%EOF\n"


def _file_input(ctx: Context, check: Check) -> None:
    pdf = base64.b64encode(_one_page_pdf("Meeting notes: the launch moved to Tuesday.")).decode()
    content = [{"type": "input_text", "text": "What day is the launch, according to the file?"},
               {"type": "input_file", "filename": "notes.pdf",
                "file_data": f"data:application/pdf;base64,{pdf}"}]
    _simple({"input": [{"type": "message", "role": "user", "content": content}]})(ctx, check)


def hosted_items_typed(check: Check, items: list[Json]) -> None:
    """Items the Open Responses document does not define but OpenAI's API does (the gateway
    emits OpenAI's types for hosted tools): checked with the OpenAI SDK's types."""
    try:
        import pydantic
        from openai.types.responses import ResponseOutputItem
    except ImportError:
        check.schema_skipped = True
        return
    adapter: Any = pydantic.TypeAdapter(ResponseOutputItem)
    problems = []
    for item in items:
        try:
            adapter.validate_python(item)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            problems.append(f"{item.get('type')} at /{'/'.join(map(str, first['loc']))}: {first['msg']}")
    check.typed(problems[:5])


def _offline_web_search(ctx: Context, check: Check) -> None:
    """The suite's optional ``offline-web-search``: a forced ``web_search`` with live web
    access off must produce a ``web_search_call``."""
    if not ctx.offline_web_search:
        check.skip_reason = "Offline web search is not enabled (--enable-offline-web-search)"
        return
    ex = ctx.client.post("/responses", {
        "model": ctx.model, "input": [user("Find the most relevant cached result for OpenResponses.")],
        "tools": [{"type": "web_search", "external_web_access": False}],
        "tool_choice": {"type": "web_search"}, "include": ["web_search_call.action.sources"]})
    if not check.expect(ex.status == 200, f"HTTP {ex.status}: {ex.text[:200]}"):
        return
    r = ex.body if isinstance(ex.body, dict) else {}
    output = [i for i in r.get("output") or [] if isinstance(i, dict)]
    hosted = [i for i in output if i.get("type") == "web_search_call"]
    tools = [t for t in r.get("tools") or [] if not (isinstance(t, dict) and t.get("type") == "web_search")]
    standard = {**r, "output": [i for i in output if i not in hosted], "tools": tools}
    if isinstance(r.get("tool_choice"), dict) and r["tool_choice"].get("type") == "web_search":
        standard["tool_choice"] = "required"  # a hosted choice the document has no schema for
    check.schema("ResponseResource", standard)
    hosted_items_typed(check, hosted)
    has_output(check, r)
    has_type(check, r, "web_search_call")


def cases() -> list[TestCase]:
    from app.cli.conformance import file_search
    from app.cli.conformance import websocket as ws

    image = [{"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
             {"type": "input_image", "image_url": f"data:image/png;base64,{HEART_PNG}"}]
    phase = [{"type": "message", "role": "assistant", "phase": "commentary",
              "content": "I should answer with the saved number."},
             {"type": "message", "role": "assistant", "phase": "final_answer",
              "content": "The number is four."},
             user("Repeat only the number.")]
    multi = [user("My name is Alice."),
             {"type": "message", "role": "assistant",
              "content": "Hello Alice! Nice to meet you. How can I help you today?"},
             user("What is my name?")]
    system = [{"type": "message", "role": "system",
               "content": "You are a pirate. Always respond in pirate speak."},
              user("Say hello.")]
    weather = {"input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]}
    r = "responses"
    return [
        TestCase("basic-response", r, "Basic Text Response",
                 _simple({"input": [user("Say hello in exactly 3 words.")]})),
        TestCase("assistant-phase", r, "Assistant Message Phase", _simple({"input": phase})),
        TestCase("response-output-phase-schema", r, "Response Output Phase Schema", _phase_schema),
        TestCase("streaming-response", r, "Streaming Response",
                 _simple({"input": [user("Count from 1 to 5.")]}, stream=True)),
        *ws.cases(),
        TestCase("system-prompt", r, "System Prompt", _simple({"input": system})),
        TestCase("tool-calling", r, "Tool Calling", _simple(weather, tool=True)),
        TestCase("tool-calling-streaming", r, "Tool Calling (Streaming)", _tool_streaming),
        TestCase("image-input", r, "Image Input",
                 _simple({"input": [{"type": "message", "role": "user", "content": image}]})),
        TestCase("file-input", r, "File Input", _file_input, origin="extra"),
        TestCase("multi-turn", r, "Multi-turn Conversation", _simple({"input": multi})),
        TestCase("compact-response", r, "Compaction Endpoint", _compact),
        TestCase("compact-missing-model", r, "Compaction Missing Required Model", _compact_missing_model),
        TestCase("file-search", r, "File Search", file_search.run),
        TestCase("offline-web-search", r, "Offline Web Search", _offline_web_search),
    ]
