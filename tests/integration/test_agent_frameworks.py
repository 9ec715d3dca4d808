"""Agent frameworks as real streamed Responses clients: pydantic-ai and the OpenAI Agents SDK.

Both run against the real gateway in front of real llama.cpp servers on the scripted Harmony
models (tests/support/fixtures.py): ``scripted-reasoning`` thinks "The user greets me; reply
politely." then answers "Hi there, friend!", ``scripted-tool`` always calls
``get_weather({"city":"Paris"})``.  Every request the frameworks send is recorded with an
httpx event hook, so the tests check what the gateway received as well as what came back.

The ``openresponses`` tests pin the spec's event names (``response.reasoning.delta``) on
these OpenAI-SDK-based clients and assert the loss the issue measured: it is why the
``auto`` event dialect answers the OpenAI SDK in OpenAI's names (app/api/responses/dialect.py).

Offline: the Agents SDK exports traces to api.openai.com unless tracing is disabled, so it is
(``set_tracing_disabled`` and ``RunConfig(tracing_disabled=True)``); pydantic-ai sends nothing
anywhere but the model's base URL (its price updater is opt-in, logfire is a no-op shim).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from agents import Agent as SdkAgent
from agents import (
    MaxTurnsExceeded,
    RawResponsesStreamEvent,
    RunConfig,
    RunItemStreamEvent,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.openai_responses import OpenAIResponsesModel as SdkResponsesModel
from openai import AsyncOpenAI
from openai.types.responses import ResponseReasoningTextDeltaEvent, ResponseReasoningTextDoneEvent
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider

from tests.integration.conftest import run_gateway, write_config
from tests.support.fixtures import SCRIPT_REASONING

pytestmark = pytest.mark.integration

set_tracing_disabled(True)  # the Agents SDK would export traces to api.openai.com
NO_TRACING = RunConfig(tracing_disabled=True)

THOUGHT = "The user greets me; reply politely."
ANSWER = "Hi there, friend!"
WEATHER = '{"temp_c": 21}'
assert THOUGHT in SCRIPT_REASONING and ANSWER in SCRIPT_REASONING


class Recorder:
    """Every request an AsyncOpenAI client sends (retries included; the SDK runs on httpx2)."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    async def __call__(self, request: httpx2.Request) -> None:
        self.requests.append(request)

    def bodies(self, path: str = "/v1/responses") -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests
                if r.method == "POST" and r.url.path == path]


def _openai(url: str, recorder: Recorder, dialect: str | None = None, **options: Any) -> AsyncOpenAI:
    headers = {"ocm-event-dialect": dialect} if dialect else None
    return AsyncOpenAI(base_url=f"{url}/v1", api_key="not-needed", timeout=60, default_headers=headers,
                       http_client=httpx2.AsyncClient(event_hooks={"request": [recorder]}), **options)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def sdk_client(gateway_url: str, recorder: Recorder) -> AsyncIterator[AsyncOpenAI]:
    """The OpenAI SDK as the frameworks build it: default retries (2), auto dialect."""
    async with _openai(gateway_url, recorder) as client:
        yield client


def _stored_input(url: str, response_id: str) -> list[dict[str, Any]]:
    """The input items the gateway stored for a response (what the model was given)."""
    page = httpx.get(f"{url}/v1/responses/{response_id}/input_items", params={"limit": 100}, timeout=30)
    page.raise_for_status()
    items: list[dict[str, Any]] = page.json()["data"]
    return items


def _responses(messages: list[ModelMessage]) -> list[ModelResponse]:
    return [m for m in messages if isinstance(m, ModelResponse)]


# --- pydantic-ai ---------------------------------------------------------------------------------


def _pydantic_agent(client: AsyncOpenAI, model: str,
                    settings: OpenAIResponsesModelSettings | None = None) -> Agent[None, str]:
    return Agent(OpenAIResponsesModel(model, provider=OpenAIProvider(openai_client=client)),
                 model_settings=settings)


async def _pydantic_streamed_turn(agent: Agent[None, str], prompt: str,
                                  history: list[ModelMessage] | None = None,
                                  ) -> tuple[str, list[ModelMessage], list[Any]]:
    """One streamed turn through ``agent.iter``: (output, all messages, the model's stream events)."""
    events: list[Any] = []
    async with agent.iter(prompt, message_history=history) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    events += [event async for event in stream]
        assert run.result is not None
        return run.result.output, run.result.all_messages(), events


async def test_pydantic_ai_streams_thinking_and_replays_it(gateway_url: str, sdk_client: AsyncOpenAI,
                                                           recorder: Recorder) -> None:
    agent = _pydantic_agent(sdk_client, "scripted-reasoning")
    output, messages, events = await _pydantic_streamed_turn(agent, "hi")
    assert output == ANSWER
    # The thinking part arrives while streaming (gpt-oss-style raw chain of thought: pydantic-ai
    # keeps it in provider_details["raw_content"], fed by response.reasoning_text.delta) ...
    started = [e.part for e in events if isinstance(e, PartStartEvent)]
    assert [type(p) for p in started] == [ThinkingPart, TextPart]
    assert any(isinstance(e, PartDeltaEvent) and isinstance(e.delta, ThinkingPartDelta) for e in events)
    (response,) = _responses(messages)
    thinking, text = response.parts
    assert isinstance(thinking, ThinkingPart) and isinstance(text, TextPart)
    assert thinking.provider_details == {"raw_content": [THOUGHT]} and text.content == ANSWER
    assert thinking.id is not None and thinking.id.startswith("rs_")
    # ... and the next turn carries it back: pydantic-ai resends the whole history (no
    # previous_response_id), the reasoning item with its reasoning_text, and the gateway keeps it.
    output, messages, _ = await _pydantic_streamed_turn(agent, "again", messages)
    assert output == ANSWER
    sent = recorder.bodies()[-1]
    assert "previous_response_id" not in sent and sent["stream"] is True
    reasoning = [item for item in sent["input"] if item.get("type") == "reasoning"]
    assert reasoning == [{"id": thinking.id, "type": "reasoning", "summary": [], "encrypted_content": None,
                          "content": [{"type": "reasoning_text", "text": THOUGHT}]}]
    second = _responses(messages)[-1]
    assert second.provider_response_id is not None
    stored = _stored_input(gateway_url, second.provider_response_id)
    assert [(i["type"], i.get("role")) for i in stored] == [
        ("message", "user"), ("reasoning", None), ("message", "assistant"), ("message", "user")]
    assert stored[1]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]


@pytest.mark.parametrize("state", ["previous_response_id", "conversation"])
async def test_pydantic_ai_server_side_state(gateway_url: str, sdk_client: AsyncOpenAI, recorder: Recorder,
                                             state: str) -> None:
    """``openai_previous_response_id='auto'`` / ``openai_conversation_id``: only the new turn is sent."""
    if state == "conversation":
        settings = OpenAIResponsesModelSettings(
            openai_conversation_id=(await sdk_client.conversations.create()).id)
    else:
        settings = OpenAIResponsesModelSettings(openai_previous_response_id="auto")
    agent = _pydantic_agent(sdk_client, "scripted-reasoning", settings)
    _, messages, _ = await _pydantic_streamed_turn(agent, "hi")
    output, messages, _ = await _pydantic_streamed_turn(agent, "again", messages)
    assert output == ANSWER
    first, second = recorder.bodies()
    assert second["input"] == [{"role": "user", "content": "again"}]
    if state == "conversation":
        assert second["conversation"] == first["conversation"]
    else:
        assert second["previous_response_id"] == _responses(messages)[0].provider_response_id
    second_id = _responses(messages)[-1].provider_response_id
    assert second_id is not None
    stored = _stored_input(gateway_url, second_id)  # the gateway supplied the first turn, reasoning too
    assert [i["type"] for i in stored] == ["message", "reasoning", "message", "message"]
    assert stored[1]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]


async def test_pydantic_ai_over_the_websocket_mode(gateway_url: str) -> None:
    """``openai_transport='websocket'``: both turns on one socket (GET /v1/responses upgraded)."""
    async with _openai(gateway_url, Recorder(), max_retries=0) as client:
        model = OpenAIResponsesModel("scripted-reasoning", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, model_settings=OpenAIResponsesModelSettings(openai_transport="websocket"))
        async with model:
            _, messages, events = await _pydantic_streamed_turn(agent, "hi")
            output, messages, _ = await _pydantic_streamed_turn(agent, "again", messages)
    assert output == ANSWER
    assert any(isinstance(e, PartStartEvent) and isinstance(e.part, ThinkingPart) for e in events)
    first, second = _responses(messages)
    assert (first.provider_details or {}).get("transport") == "websocket"
    thinking = first.parts[0]
    assert isinstance(thinking, ThinkingPart) and thinking.provider_details == {"raw_content": [THOUGHT]}
    assert second.provider_response_id is not None
    stored = _stored_input(gateway_url, second.provider_response_id)
    assert [i["type"] for i in stored] == ["message", "reasoning", "message", "message"]


async def test_pydantic_ai_openresponses_dialect_loses_the_thinking(gateway_url: str) -> None:
    """What the issue measured, forced: the spec's names are unknown to the OpenAI SDK's parser."""
    recorder = Recorder()
    async with _openai(gateway_url, recorder, dialect="openresponses") as client:
        agent = _pydantic_agent(client, "scripted-reasoning")
        output, messages, events = await _pydantic_streamed_turn(agent, "hi")
        assert output == ANSWER  # the answer still arrives ...
        assert not [e for e in events if isinstance(e, PartStartEvent) and isinstance(e.part, ThinkingPart)]
        (response,) = _responses(messages)
        assert [type(p) for p in response.parts] == [TextPart]  # ... the thinking part never does
        _, messages, _ = await _pydantic_streamed_turn(agent, "again", messages)
    # and the next turn's history has no reasoning to send back: the chain of thought is gone.
    assert not [item for item in recorder.bodies()[-1]["input"] if item.get("type") == "reasoning"]
    second_id = _responses(messages)[-1].provider_response_id
    assert second_id is not None
    assert "reasoning" not in [i["type"] for i in _stored_input(gateway_url, second_id)]


async def test_pydantic_ai_tool_loop(gateway_url: str, sdk_client: AsyncOpenAI, recorder: Recorder) -> None:
    agent = _pydantic_agent(sdk_client, "scripted-tool")
    cities: list[str] = []

    @agent.tool_plain(name="get_weather")
    def weather(city: str) -> str:
        """Weather for a city."""
        cities.append(city)
        return WEATHER

    # The scripted model calls get_weather on every turn, so the run never ends by itself: the
    # usage limit stops it before a third request.
    with pytest.raises(UsageLimitExceeded, match="request_limit of 2"):
        async with agent.run_stream("Weather in Paris?", usage_limits=UsageLimits(request_limit=2)) as run:
            await run.get_output()
    assert cities == ["Paris", "Paris"]
    first, second = recorder.bodies()
    assert [t["name"] for t in first["tools"]] == ["get_weather"]
    # The call and the tool's result went back to the gateway, which took them as the model's input.
    call, result = second["input"][1:]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert result == {"type": "function_call_output", "call_id": call["call_id"], "output": WEATHER}


async def test_pydantic_ai_tool_loop_messages(sdk_client: AsyncOpenAI) -> None:
    """The same loop without streaming: the history holds call → return → call (no answer)."""
    agent = _pydantic_agent(sdk_client, "scripted-tool")

    @agent.tool_plain(name="get_weather")
    def weather(city: str) -> str:
        """Weather for a city."""
        return WEATHER

    history: list[ModelMessage] = []
    with pytest.raises(UsageLimitExceeded):
        async with agent.iter("Weather in Paris?", usage_limits=UsageLimits(request_limit=2)) as run:
            async for _ in run:
                history = run.all_messages()
    kinds = [type(p).__name__ for m in history for p in m.parts]
    assert kinds[:4] == ["UserPromptPart", "ToolCallPart", "ToolReturnPart", "ToolCallPart"]
    returned = [p for m in history if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, ToolReturnPart)]
    calls = [p for m in history if isinstance(m, ModelResponse) for p in m.parts
             if isinstance(p, ToolCallPart)]
    assert returned[0].content == WEATHER and returned[0].tool_call_id == calls[0].tool_call_id


# --- OpenAI Agents SDK ---------------------------------------------------------------------------


def _sdk_agent(client: AsyncOpenAI, model: str, **options: Any) -> SdkAgent[Any]:
    return SdkAgent(name="assistant", instructions="Be brief.", model=SdkResponsesModel(model, client),
                    **options)


async def _sdk_streamed(agent: SdkAgent[Any], prompt: str, **options: Any,
                        ) -> tuple[Any, list[Any], list[str]]:
    """A streamed run: (final output, the raw Responses events, the run item names)."""
    run = Runner.run_streamed(agent, prompt, run_config=NO_TRACING, **options)
    raw: list[Any] = []
    items: list[str] = []
    async for event in run.stream_events():
        if isinstance(event, RawResponsesStreamEvent):
            raw.append(event.data)
        elif isinstance(event, RunItemStreamEvent):
            items.append(event.name)
    return run.final_output, raw, items


async def test_agents_sdk_streams_reasoning_events(sdk_client: AsyncOpenAI) -> None:
    output, raw, items = await _sdk_streamed(_sdk_agent(sdk_client, "scripted-reasoning"), "hi")
    assert output == ANSWER
    deltas = [e for e in raw if isinstance(e, ResponseReasoningTextDeltaEvent)]
    assert "".join(e.delta for e in deltas) == THOUGHT
    (done,) = [e for e in raw if isinstance(e, ResponseReasoningTextDoneEvent)]
    assert done.text == THOUGHT and done.item_id == deltas[0].item_id
    assert items == ["reasoning_item_created", "message_output_created"]
    assert raw[-1].type == "response.completed"


async def test_agents_sdk_openresponses_dialect_loses_the_reasoning_events(gateway_url: str) -> None:
    """Forced to the spec's names, the SDK parses response.reasoning.delta as an audio delta."""
    async with _openai(gateway_url, Recorder(), dialect="openresponses", max_retries=0) as client:
        output, raw, items = await _sdk_streamed(_sdk_agent(client, "scripted-reasoning"), "hi")
    assert output == ANSWER
    typed = ResponseReasoningTextDeltaEvent | ResponseReasoningTextDoneEvent
    assert not [e for e in raw if isinstance(e, typed)]
    misread = [e for e in raw if e.type.startswith("response.reasoning.")]
    assert {type(e).__name__ for e in misread} == {"ResponseAudioDeltaEvent"}  # the SDK's fallback type
    assert len(misread) > 1
    # The reasoning item itself survives (output_item.done carries it whole): only the streamed
    # reasoning, what a UI shows while the model thinks, is lost.
    assert items == ["reasoning_item_created", "message_output_created"]


async def test_agents_sdk_function_tool_round_trip(sdk_client: AsyncOpenAI, recorder: Recorder) -> None:
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        cities.append(city)
        return WEATHER

    agent = _sdk_agent(sdk_client, "scripted-tool", tools=[get_weather])
    # The scripted model calls the tool on every turn: max_turns ends the run after the second.
    with pytest.raises(MaxTurnsExceeded):
        await _sdk_streamed(agent, "Weather in Paris?", max_turns=2)
    assert cities == ["Paris", "Paris"]
    first, second = recorder.bodies()
    assert [t["name"] for t in first["tools"]] == ["get_weather"] and first["stream"] is True
    user, call, result = second["input"]
    assert user == {"role": "user", "content": "Weather in Paris?"}
    assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert result == {"type": "function_call_output", "call_id": call["call_id"], "output": WEATHER}


async def test_agents_sdk_previous_response_id_chaining(gateway_url: str, sdk_client: AsyncOpenAI,
                                                        recorder: Recorder) -> None:
    agent = _sdk_agent(sdk_client, "scripted-reasoning")
    first = await Runner.run(agent, "hi", run_config=NO_TRACING)
    assert first.final_output == ANSWER and first.last_response_id is not None
    second = await Runner.run(agent, "again", previous_response_id=first.last_response_id,
                              run_config=NO_TRACING)
    assert second.final_output == ANSWER and second.last_response_id is not None
    sent = recorder.bodies()[-1]
    assert sent["previous_response_id"] == first.last_response_id
    assert sent["input"] == [{"role": "user", "content": "again"}]  # only the new turn is sent ...
    stored = _stored_input(gateway_url, second.last_response_id)  # ... the gateway has the rest
    assert [i["type"] for i in stored] == ["message", "reasoning", "message", "message"]
    assert stored[1]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert stored[3]["content"] == [{"type": "input_text", "text": "again"}]


async def test_agents_sdk_conversation_id(gateway_url: str, sdk_client: AsyncOpenAI,
                                          recorder: Recorder) -> None:
    """A streamed run per turn on one conversation: the gateway keeps the context, not the client."""
    conversation = await sdk_client.conversations.create()
    agent = _sdk_agent(sdk_client, "scripted-reasoning")
    response_ids: list[str] = []
    for prompt in ("hi", "again"):
        run = Runner.run_streamed(agent, prompt, conversation_id=conversation.id, run_config=NO_TRACING)
        async for _ in run.stream_events():
            pass
        assert run.final_output == ANSWER and run.last_response_id is not None
        response_ids.append(run.last_response_id)
    sent = recorder.bodies()[-1]
    assert sent["conversation"] == conversation.id and sent["input"] == [{"role": "user", "content": "again"}]
    # The second response was given the first turn (reasoning included) from the conversation ...
    stored = _stored_input(gateway_url, response_ids[1])
    assert [i["type"] for i in stored] == ["message", "reasoning", "message", "message"]
    assert stored[1]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    # ... which now holds both turns.
    items = [item async for item in sdk_client.conversations.items.list(conversation.id, order="asc")]
    assert [item.type for item in items] == ["message", "reasoning", "message"] * 2
    texts = [getattr(part, "text", None) for item in items if item.type == "message" for part in item.content]
    assert texts == ["hi", ANSWER, "again", ANSWER]


# --- the dialect, per deployment -----------------------------------------------------------------


async def test_pinned_openresponses_deployment_and_the_per_request_header(
        scripted_models: dict[str, str], tmp_path: Path) -> None:
    """``[responses] event_dialect = "openresponses"`` overrides auto-detection; the header overrides it."""
    config = write_config(tmp_path / "gw.toml", scripted_models, tmp_path / "store.sqlite3")
    config.write_text(config.read_text() + '\n[responses]\nevent_dialect = "openresponses"\n')
    with run_gateway(config) as gateway:
        for dialect, keeps in ((None, False), ("openai", True)):
            async with _openai(gateway.url, Recorder(), dialect=dialect, max_retries=0) as client:
                _, raw, _ = await _sdk_streamed(_sdk_agent(client, "scripted-reasoning"), "hi")
            got = "".join(e.delta for e in raw if isinstance(e, ResponseReasoningTextDeltaEvent))
            assert got == (THOUGHT if keeps else ""), dialect


# --- the streamed error event and retries --------------------------------------------------------


def _counted(url: str, status: str) -> float:
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    pattern = (r'^ocm_requests_total\{model="scripted-tool",route="/v1/responses",status="'
               + status + r'"\} (\S+)$')
    found = re.search(pattern, metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


TIME_TOOL: Any = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}


@function_tool
def get_time() -> str:
    """Current time."""
    return "12:00"


@pytest.mark.parametrize("dialect", ["openai", "openresponses"])
async def test_a_refused_tool_call_mid_stream_is_a_typed_error_not_retried(
        gateway_url: str, dialect: str) -> None:
    """The scripted model calls get_weather, the request offers only get_time: tool_not_allowed."""
    recorder = Recorder()
    before = _counted(gateway_url, "200")
    # Default retries (2): a retried refusal would show as more requests.
    async with _openai(gateway_url, recorder, dialect=dialect) as client:
        # The raw SDK stream: the error event (after response.created / in_progress) raises.
        seen: list[str] = []
        with pytest.raises(openai.APIError) as info:
            stream = await client.responses.create(model="scripted-tool", input="Weather?", stream=True,
                                                   tools=[TIME_TOOL])
            async for event in stream:
                seen.append(event.type)
        assert seen == ["response.created", "response.in_progress"]
        assert not isinstance(info.value, openai.APIStatusError)  # a 200 stream, failed mid-way
        assert info.value.code == "tool_not_allowed" and "get_weather" in info.value.message
        assert info.value.type == "server_error"
        # The Agents SDK's streamed run surfaces the same typed error.
        with pytest.raises(openai.APIError) as info:
            await _sdk_streamed(_sdk_agent(client, "scripted-tool", tools=[get_time]), "Weather?")
        assert info.value.code == "tool_not_allowed"
        # pydantic-ai wraps it, the error object kept as the body.
        agent = _pydantic_agent(client, "scripted-tool")

        @agent.tool_plain(name="get_time")
        def time() -> str:
            """Current time."""
            return "12:00"

        with pytest.raises(ModelAPIError) as wrapped:
            async with agent.run_stream("Weather?") as run:
                await run.get_output()
        # A failure of the model's output: pydantic-ai reads the error's type (server_error) as
        # a server error, the typed error object kept as the cause and the body.
        assert isinstance(wrapped.value, ModelHTTPError) and wrapped.value.status_code >= 500
        assert isinstance(wrapped.value.__cause__, openai.APIError)
        assert wrapped.value.__cause__.code == "tool_not_allowed"
    assert len(recorder.requests) == 3  # one each: nobody retried
    assert _counted(gateway_url, "200") - before == 3


def _error_events(url: str, dialect: str) -> list[dict[str, Any]]:
    body = {"model": "scripted-tool", "input": "Weather?", "stream": True, "tools": [TIME_TOOL]}
    with httpx.stream("POST", f"{url}/v1/responses", json=body, timeout=60,
                      headers={"ocm-event-dialect": dialect}) as response:
        data = [json.loads(line[6:]) for line in response.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"]
    return [event for event in data if event["type"] == "error"]


def test_the_error_event_shape_per_dialect(gateway_url: str) -> None:
    """Open Responses nests the error; OpenAI's dialect adds the flat fields beside the nested object."""
    (nested,) = _error_events(gateway_url, "openresponses")
    assert set(nested) == {"type", "sequence_number", "error"}
    assert nested["error"]["code"] == "tool_not_allowed"
    (flat,) = _error_events(gateway_url, "openai")
    assert flat["code"] == "tool_not_allowed" and flat["message"] == nested["error"]["message"]
    assert flat["param"] is None and flat["error"] == nested["error"]


async def test_a_refused_tool_call_not_streamed_is_a_502_not_retried(gateway_url: str) -> None:
    recorder = Recorder()
    before = _counted(gateway_url, "502")
    async with _openai(gateway_url, recorder) as client:  # default max_retries=2
        with pytest.raises(openai.InternalServerError) as info:
            await Runner.run(_sdk_agent(client, "scripted-tool", tools=[get_time]), "Weather?",
                             run_config=NO_TRACING)
    assert info.value.status_code == 502 and info.value.code == "tool_not_allowed"
    assert len(recorder.requests) == 1
    assert _counted(gateway_url, "502") - before == 1

