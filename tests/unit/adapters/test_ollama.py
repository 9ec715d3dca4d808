"""Ollama ``/api/chat`` adapter against the documented exchanges in tests/fixtures/ollama.

The fixtures are replayed byte for byte through ``httpx.MockTransport``; each names
the Ollama documentation it follows.
"""

from __future__ import annotations

import httpx
import pytest

from adapters.ollama import OllamaBackend, OllamaStream
from adapters.routing import RetryPolicy
from app.core.conversation import (
    Conversation,
    FunctionTool,
    GenerationParams,
    ImagePart,
    Message,
    ResponseFormat,
    TextPart,
    ToolCall,
    ToolChoice,
)
from app.core.errors import (
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    UpstreamError,
    UpstreamRateLimited,
)
from app.core.output import Chunk, ToolCallChunk, Usage
from app.core.prompt import Prompt
from tests.support.chat_fakes import Recorded
from tests.support.wire import RecordedBody

USER = Conversation(messages=(Message("user", (TextPart("why is the sky blue?"),)),))
WEATHER = FunctionTool("get_weather", "Get the weather in a given city",
                       {"type": "object", "properties": {"city": {"type": "string"}}})
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def _prompt(conv: Conversation = USER) -> Prompt:
    return Prompt(token_ids=None, conversation=conv)


async def _collect(transport: httpx.AsyncBaseTransport, params: GenerationParams | None = None,
                   conv: Conversation = USER, urls: list[str] | None = None) -> list[Chunk]:
    async with httpx.AsyncClient(transport=transport) as client:
        backend = OllamaBackend(client, urls or ["http://ollama:11434"], "llama3.2",
                                RetryPolicy(backoff=0.0))
        return [c async for c in backend.stream(_prompt(conv), params or GenerationParams())]


def _text(chunks: list[Chunk]) -> str:
    return "".join(c.text for c in chunks)


async def test_documented_text_stream() -> None:
    fake = Recorded("chat_stream")
    chunks = await _collect(fake.transport(), GenerationParams(max_tokens=64))
    assert _text(chunks) == "The sky is blue."
    assert [c.finish.kind for c in chunks if c.finish] == ["eos"]
    assert chunks[-1].usage == Usage(prompt_tokens=26, completion_tokens=282)
    assert fake.paths == ["/api/chat"]
    body = fake.requests[0]
    assert body == {"model": "llama3.2", "stream": True, "options": {"num_predict": 64},
                    "messages": [{"role": "user", "content": "why is the sky blue?"}]}


async def test_documented_tool_call_stream() -> None:
    conv = Conversation(USER.messages, tools=(WEATHER,))
    chunks = await _collect(Recorded("chat_stream_tools").transport(), conv=conv)
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert calls == [ToolCallChunk(0, None, "get_weather", '{"city":"Tokyo"}')]
    assert [c.finish.kind for c in chunks if c.finish] == ["tool_calls"]
    assert chunks[-1].usage == Usage(prompt_tokens=169, completion_tokens=15)


async def test_thinking_then_answer() -> None:
    fake = Recorded("chat_stream_thinking")
    chunks = await _collect(fake.transport(), GenerationParams(reasoning_effort="high"))
    assert "".join(c.reasoning for c in chunks) == "The user asks for 17 times 23; that is 391."
    assert _text(chunks) == "17 × 23 = 391."
    first_text = next(i for i, c in enumerate(chunks) if c.text)
    assert all(not c.reasoning for c in chunks[first_text:])  # reasoning strictly first
    assert fake.requests[0]["think"] == "high"


async def test_parallel_calls_with_ids() -> None:
    chunks = await _collect(Recorded("chat_stream_parallel_tools").transport())
    assert [tc for c in chunks for tc in c.tool_calls] == [
        ToolCallChunk(0, "call_ny7f3k2a", "get_temperature", '{"city":"New York"}'),
        ToolCallChunk(1, "call_ld9q1x0b", "get_conditions", '{"city":"London"}'),
    ]


def test_calls_without_index_are_numbered_in_arrival_order() -> None:
    stream = OllamaStream()
    line = {"message": {"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}}
    first, second = stream.chunk(line), stream.chunk(line)
    assert [first.tool_calls[0].index, second.tool_calls[0].index] == [0, 1]
    done = stream.chunk({"message": {"content": ""}, "done": True, "done_reason": "stop"})
    assert done.finish is not None and done.finish.kind == "tool_calls"


@pytest.mark.parametrize(("reason", "kind"), [("stop", "eos"), ("length", "length")])
def test_done_reasons(reason: str, kind: str) -> None:
    chunk = OllamaStream().chunk({"message": {"content": "!"}, "done": True, "done_reason": reason,
                                  "prompt_eval_count": 3, "eval_count": 4})
    assert chunk.text == "!" and chunk.finish is not None and chunk.finish.kind == kind
    assert chunk.usage == Usage(prompt_tokens=3, completion_tokens=4)


async def test_line_split_anywhere_gives_the_same_chunks() -> None:
    record = Recorded("chat_stream_thinking").record
    data = "".join(c["text"] for c in record["response"]["chunks"]).encode()
    expected = await _collect(Recorded("chat_stream_thinking").transport())
    for size in (1, 7, 64):
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        transport = httpx.MockTransport(lambda _r, p=pieces: httpx.Response(200, stream=RecordedBody(p)))
        assert await _collect(transport) == expected


def test_request_body_shape() -> None:
    conv = Conversation(
        messages=(
            Message("system", (TextPart("Be brief."),)),
            Message("developer", (TextPart("Use tools."),)),
            Message("user", (TextPart("What is this?"), ImagePart(f"data:image/png;base64,{PNG}"))),
            Message("assistant", (), tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),),
                    reasoning="Need the weather."),
            Message("tool", (TextPart('{"temp_c":21}'),), tool_call_id="call_1"),
        ),
        tools=(WEATHER,),
        response_format=ResponseFormat("answer", {"type": "object"}),
    )
    params = GenerationParams(max_tokens=100, temperature=0.2, top_p=0.9, seed=7, stop=("END",),
                              frequency_penalty=0.1, presence_penalty=0.3, reasoning_effort="low")
    body = OllamaBackend(httpx.AsyncClient(), ["http://o"], "qwen3").request_body(_prompt(conv), params)
    assert body == {
        "model": "qwen3", "stream": True, "think": "low", "format": {"type": "object"},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "What is this?", "images": [PNG]},
            {"role": "assistant", "content": "", "thinking": "Need the weather.",
             "tool_calls": [{"id": "call_1", "function": {"index": 0, "name": "get_weather",
                                                          "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": '{"temp_c":21}', "tool_call_id": "call_1",
             "tool_name": "get_weather"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather in a given city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "options": {"num_predict": 100, "temperature": 0.2, "top_p": 0.9, "seed": 7,
                    "frequency_penalty": 0.1, "presence_penalty": 0.3, "stop": ["END"]},
    }


@pytest.mark.parametrize(("conv", "params", "param"), [
    (Conversation((Message("user", (ImagePart("https://example.com/cat.png"),)),)),
     GenerationParams(), "image_url"),
    (Conversation(USER.messages, tools=(WEATHER,)),
     GenerationParams(tool_choice=ToolChoice("required", ("get_weather",))), "tool_choice"),
    (Conversation((Message("assistant", (), tool_calls=(ToolCall("c", "f", "[1]"),)),)),
     GenerationParams(), "messages"),
])
def test_rejected_requests_name_the_param(conv: Conversation, params: GenerationParams,
                                          param: str) -> None:
    backend = OllamaBackend(httpx.AsyncClient(), ["http://o"], "m")
    with pytest.raises(InvalidRequest) as info:
        backend.request_body(_prompt(conv), params)
    assert info.value.param == param and info.value.status == 400


def test_tool_choice_none_sends_no_tools_and_prompts_are_refused() -> None:
    backend = OllamaBackend(httpx.AsyncClient(), ["http://o"], "m")
    conv = Conversation(USER.messages, tools=(WEATHER,))
    none = GenerationParams(tool_choice=ToolChoice("none"))
    assert "tools" not in backend.request_body(_prompt(conv), none)
    with pytest.raises(InvalidRequest):
        backend.request_body(Prompt(token_ids=(1, 2, 3)), GenerationParams())


def _answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> httpx.MockTransport:
    return httpx.MockTransport(lambda _r: httpx.Response(status, content=body, headers=headers or {}))


@pytest.mark.parametrize(("status", "body", "exc", "code", "http"), [
    (400, b'{"error":"invalid options"}', InvalidRequest, "upstream_rejected", 400),
    (400, b'{"error":"input length exceeds the context length"}', ContextLengthExceeded,
     "context_length_exceeded", 400),
    (429, b'{"error":"too many requests"}', UpstreamRateLimited, "rate_limit_exceeded", 429),
    (500, b'{"error":"the model failed to generate a response"}', UpstreamError, "upstream_error", 502),
    (500, b"not json at all", UpstreamError, "upstream_error", 502),
])
async def test_http_errors(status: int, body: bytes, exc: type[GatewayError], code: str,
                           http: int) -> None:
    with pytest.raises(exc) as info:
        await _collect(_answer(status, body))
    assert (info.value.code, info.value.status) == (code, http)
    text = body.decode()
    assert (text[10:-2] if text.startswith("{") else text) in info.value.message


async def test_model_not_found_is_a_gateway_config_error() -> None:
    fake = Recorded("error_model_not_found")
    with pytest.raises(UpstreamError) as info:
        await _collect(fake.transport())
    assert info.value.code == "upstream_not_found" and info.value.status == 502
    assert 'model "nope" not found' in info.value.message
    assert len(fake.requests) == 1  # not retried on other replicas


async def test_mid_stream_error_line() -> None:
    async with httpx.AsyncClient(transport=Recorded("error_mid_stream").transport()) as client:
        backend = OllamaBackend(client, ["http://o"], "llama3.2")
        got: list[Chunk] = []
        with pytest.raises(UpstreamError) as info:
            async for chunk in backend.stream(_prompt(), GenerationParams()):
                got.append(chunk)
    assert _text(got) == " Yes."
    assert "an error was encountered while running the model" in info.value.message


async def test_leaving_early_closes_the_upstream_response() -> None:
    fake = Recorded("chat_stream")
    async with httpx.AsyncClient(transport=fake.transport()) as client:
        stream = OllamaBackend(client, ["http://o"], "m").stream(_prompt(), GenerationParams())
        first = await stream.__anext__()
        assert first.text == "The" and fake.closed == 0
        await stream.aclose()
    assert fake.closed == 1


async def test_failover_before_the_first_byte() -> None:
    hosts: list[str] = []
    good = Recorded("chat_stream")

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "down":
            return httpx.Response(503, json={"error": "server busy"})
        return good(request)

    chunks = await _collect(httpx.MockTransport(handler), urls=["http://down:1", "http://up:2"])
    assert hosts == ["down", "up"] and _text(chunks) == "The sky is blue."


async def test_ready() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200 if request.url.host == "up" else 500, json={"version": "0.12.0"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        assert await OllamaBackend(client, ["http://down", "http://up"], "m").ready()
        assert not await OllamaBackend(client, ["http://down"], "m").ready()
    assert set(seen) == {"/api/version"}


def test_capabilities_are_honest() -> None:
    caps = OllamaBackend.capabilities
    assert (caps.prompt, caps.chat, caps.token_ids, caps.logprobs, caps.n) == (False, True, False,
                                                                             False, False)
    assert (caps.seed, caps.json_schema, caps.images, caps.max_top_logprobs) == (True, True, True, 0)
