"""OpenAI-compatible adapter against the real vLLM and llama.cpp chat recordings.

``tests/fixtures/wire/{vllm,llamacpp}/07*`` are replayed byte for byte through
``httpx.MockTransport``; the rest are pure mapping tests of what those servers (and
hosted providers) send that the recordings do not cover.
"""

from __future__ import annotations

import httpx
import pytest

from adapters.openai_chat import ChatStream, OpenAIChatBackend, api_root
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
from app.core.output import Chunk, Finish, TokenLogprob, ToolCallChunk, TopLogprob, Usage
from app.core.prompt import Prompt
from tests.support.chat_fakes import Recorded
from tests.support.wire import RecordedBody

USER = Conversation(messages=(Message("user", (TextPart("hi"),)),))
WEATHER = FunctionTool("get_weather", "Get the current weather for a city.",
                       {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]})
ANSWER = "Hello from a scripted tiny model!"


def _prompt(conv: Conversation = USER) -> Prompt:
    return Prompt(token_ids=None, conversation=conv)


async def _collect(transport: httpx.AsyncBaseTransport, params: GenerationParams | None = None,
                   conv: Conversation = USER, urls: list[str] | None = None,
                   api_key: str | None = None) -> list[Chunk]:
    async with httpx.AsyncClient(transport=transport) as client:
        backend = OpenAIChatBackend(client, urls or ["http://upstream:8000"], "tiny",
                                    RetryPolicy(backoff=0.0), api_key=api_key)
        return [c async for c in backend.stream(_prompt(conv), params or GenerationParams())]


def _text(chunks: list[Chunk]) -> str:
    return "".join(c.text for c in chunks)


@pytest.mark.parametrize(("server", "name", "text", "usage"), [
    ("vllm", "07b_chat_stream", "final" + ANSWER, None),
    ("vllm", "07c_chat_stream_usage_no_skip_special", "<|channel|>final<|message|>" + ANSWER,
     Usage(prompt_tokens=7, completion_tokens=11)),
    ("llamacpp", "07b_chat_stream", ANSWER, Usage(prompt_tokens=7, completion_tokens=11,
                                                 cached_tokens=6)),
    ("llamacpp", "07c_chat_stream_with_tools_final_model", ANSWER,
     Usage(prompt_tokens=7, completion_tokens=11, cached_tokens=6)),
])
async def test_recorded_text_streams(server: str, name: str, text: str, usage: Usage | None) -> None:
    fake = Recorded(name, server)
    chunks = await _collect(fake.transport(), GenerationParams(max_tokens=32), api_key="sk-test")
    assert _text(chunks) == text
    assert [c.finish for c in chunks if c.finish] == [Finish("eos")]
    assert [c.usage for c in chunks if c.usage] == ([usage] if usage else [])
    assert fake.paths == ["/v1/chat/completions"]
    assert fake.headers[0]["authorization"] == "Bearer sk-test"
    body = fake.requests[0]
    assert body["model"] == "tiny" and body["stream"] is True and body["max_tokens"] == 32
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "chat_template_kwargs" not in body  # only when the client sent some


async def test_chat_template_kwargs_reach_a_chat_mode_upstream() -> None:
    fake = Recorded("07b_chat_stream", "vllm")
    params = GenerationParams(template_kwargs=(("enable_thinking", False),))
    await _collect(fake.transport(), params, api_key="sk-test")
    assert fake.requests[0]["chat_template_kwargs"] == {"enable_thinking": False}


async def test_recorded_tool_call_stream() -> None:
    fake = Recorded("07e_toolmodel_chat_stream_with_tools", "llamacpp")
    conv = Conversation((Message("user", (TextPart("What is the weather in Paris?"),)),),
                        tools=(WEATHER,))
    chunks = await _collect(fake.transport(), conv=conv)
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert calls[0] == ToolCallChunk(0, "ucDMbP4cp4h2Qrh5hhSOxM3ZsJa6xU08", "get_weather", "{")
    assert all(tc.index == 0 and tc.id is None and tc.name is None for tc in calls[1:])
    assert "".join(tc.arguments for tc in calls) == '{"city":"Paris"}'
    assert [c.finish for c in chunks if c.finish] == [Finish("tool_calls")]
    assert "authorization" not in fake.headers[0]
    # The request carries the same tools the recording was made with.
    assert fake.requests[0]["tools"] == Recorded(
        "07e_toolmodel_chat_stream_with_tools", "llamacpp").record["request"]["body_json"]["tools"]
    assert fake.requests[0]["tool_choice"] == "auto"


def test_reasoning_fields() -> None:
    s = ChatStream()
    assert s.chunk({"choices": [{"delta": {"reasoning_content": "a"}}]}).reasoning == "a"
    assert s.chunk({"choices": [{"delta": {"reasoning": "b"}}]}).reasoning == "b"
    both = s.chunk({"choices": [{"delta": {"reasoning_content": "c", "reasoning": "c"}}]})
    assert both.reasoning == "c" and both.text == ""  # servers that send both: not doubled


def test_usage_details_and_finishes() -> None:
    s = ChatStream()
    chunk = s.chunk({"choices": [], "usage": {
        "prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80,
        "completion_tokens_details": {"reasoning_tokens": 12},
        "prompt_tokens_details": {"cached_tokens": 40}}})
    assert chunk.usage == Usage(prompt_tokens=50, completion_tokens=30, reasoning_tokens=12,
                                cached_tokens=40)
    reasons = {"stop": Finish("eos"), "length": Finish("length"), "tool_calls": Finish("tool_calls"),
               "content_filter": Finish("eos", refused=True)}
    for reason, finish in reasons.items():
        assert s.chunk({"choices": [{"delta": {}, "finish_reason": reason}]}).finish == finish
    vllm_stop = s.chunk({"choices": [{"delta": {}, "finish_reason": "stop", "stop_reason": "END"}]})
    assert vllm_stop.finish == Finish("stop_string", "END")


def test_a_refusal_is_answer_text_and_its_finish_is_refused() -> None:
    s = ChatStream()
    assert s.chunk({"choices": [{"delta": {"content": None, "refusal": "I can't"}}]}).text == "I can't"
    stop: dict[str, object] = {"choices": [{"delta": {}, "finish_reason": "stop"}]}
    assert s.chunk(stop).finish == Finish("eos", refused=True)
    assert ChatStream().chunk(stop).finish == Finish("eos")


def test_logprobs() -> None:
    chunk = ChatStream().chunk({"choices": [{"delta": {"content": "Hi"}, "logprobs": {"content": [
        {"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
         "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                          {"token": "Hey", "logprob": -1.5, "bytes": None}]}]}}]})
    assert chunk.logprobs == (TokenLogprob("Hi", -0.5, (72, 105), None,
                                           (TopLogprob("Hi", -0.5, (72, 105)), TopLogprob("Hey", -1.5))),)


def test_whole_calls_without_index() -> None:
    s = ChatStream()
    a = s.chunk({"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"name": "f",
                                                                             "arguments": "{}"}}]}}]})
    b = s.chunk({"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "g",
                                                                             "arguments": "{"}}]}}]})
    c = s.chunk({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "}"}}]}}]})
    assert [x.tool_calls[0].index for x in (a, b, c)] == [0, 1, 1]


def test_request_body_shape() -> None:
    conv = Conversation(
        messages=(
            Message("system", (TextPart("Be brief."),)),
            Message("developer", (TextPart("Use tools."),)),
            Message("user", (TextPart("What is this?"), ImagePart("https://x.test/cat.png", "low"))),
            Message("assistant", (), tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),),
                    reasoning="never echoed"),
            Message("tool", (TextPart('{"temp_c":21}'),), tool_call_id="call_1"),
            Message("assistant", (TextPart("21 C."),), reasoning="never echoed either"),
        ),
        tools=(FunctionTool("get_weather", None, {"type": "object"}, strict=True),),
        response_format=ResponseFormat("answer", {"type": "object"}, "The answer.", True),
    )
    params = GenerationParams(max_tokens=100, temperature=0.2, top_p=0.9, seed=7, stop=("END",),
                              frequency_penalty=0.1, presence_penalty=0.3, reasoning_effort="low",
                              logprobs=True, top_logprobs=3, parallel_tool_calls=False)
    body = OpenAIChatBackend(httpx.AsyncClient(), ["http://o"], "gpt-x").request_body(_prompt(conv), params)
    assert body == {
        "model": "gpt-x", "stream": True, "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x.test/cat.png", "detail": "low"}}]},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
            {"role": "tool", "content": '{"temp_c":21}', "tool_call_id": "call_1"},
            {"role": "assistant", "content": "21 C."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather",
                                                    "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": "auto", "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object"}, "description": "The answer.", "strict": True}},
        "max_tokens": 100, "temperature": 0.2, "top_p": 0.9, "seed": 7, "frequency_penalty": 0.1,
        "presence_penalty": 0.3, "reasoning_effort": "low", "stop": ["END"],
        "logprobs": True, "top_logprobs": 3,
    }


@pytest.mark.parametrize(("choice", "expected"), [
    (ToolChoice("auto"), "auto"),
    (ToolChoice("required"), "required"),
    (ToolChoice("required", ("get_weather",)), {"type": "function", "function": {"name": "get_weather"}}),
    (ToolChoice("required", ("get_weather", "other")), "required"),
    (ToolChoice("none"), None),
])
def test_tool_choice(choice: ToolChoice, expected: object) -> None:
    conv = Conversation(USER.messages, tools=(WEATHER,))
    body = OpenAIChatBackend(httpx.AsyncClient(), ["http://o"], "m").request_body(
        _prompt(conv), GenerationParams(tool_choice=choice))
    assert body.get("tool_choice") == expected
    assert ("tools" in body) == (expected is not None)


def test_api_root_and_prompts_are_refused() -> None:
    assert api_root("http://vllm:8000/") == "http://vllm:8000/v1"
    assert api_root("https://api.openai.com/v1") == "https://api.openai.com/v1"
    assert api_root("https://g.test/v1beta/openai/") == "https://g.test/v1beta/openai"
    with pytest.raises(InvalidRequest):
        OpenAIChatBackend(httpx.AsyncClient(), ["http://o"], "m").request_body(
            Prompt(token_ids=(1, 2)), GenerationParams())


def _error(status: int, message: str, err_type: str = "invalid_request_error") -> httpx.MockTransport:
    body = {"error": {"message": message, "type": err_type, "code": None}}
    headers = {"retry-after": "3"} if status == 429 else {}
    return httpx.MockTransport(lambda _r: httpx.Response(status, json=body, headers=headers))


@pytest.mark.parametrize(("status", "message", "exc", "code", "http"), [
    (400, "temperature must be non-negative", InvalidRequest, "upstream_rejected", 400),
    (400, "This model's maximum context length is 8192 tokens", ContextLengthExceeded,
     "context_length_exceeded", 400),
    (401, "Incorrect API key provided", UpstreamError, "upstream_auth_failed", 502),
    (404, "The model `tiny` does not exist.", UpstreamError, "upstream_not_found", 502),
    (429, "Rate limit reached", UpstreamRateLimited, "rate_limit_exceeded", 429),
    (500, "boom", UpstreamError, "upstream_error", 502),
])
async def test_http_errors(status: int, message: str, exc: type[GatewayError], code: str,
                           http: int) -> None:
    with pytest.raises(exc) as info:
        await _collect(_error(status, message))
    assert (info.value.code, info.value.status) == (code, http) and message in info.value.message
    if status == 429:
        assert isinstance(info.value, UpstreamRateLimited) and info.value.retry_after == 3.0


async def test_mid_stream_error_and_malformed_event() -> None:
    events = [b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
              b'data: {"error":{"message":"engine died","type":"InternalServerError","code":500}}\n\n']
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, stream=RecordedBody(events)))
    got: list[Chunk] = []
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(UpstreamError, match="engine died"):
            async for chunk in OpenAIChatBackend(client, ["http://o"], "m").stream(
                    _prompt(), GenerationParams()):
                got.append(chunk)
    assert _text(got) == "Hi"
    bad = httpx.MockTransport(lambda _r: httpx.Response(200, stream=RecordedBody([b"data: {nope\n\n"])))
    with pytest.raises(UpstreamError, match="malformed"):
        await _collect(bad)


async def test_leaving_early_closes_the_upstream_response() -> None:
    fake = Recorded("07b_chat_stream", "llamacpp")
    async with httpx.AsyncClient(transport=fake.transport()) as client:
        stream = OpenAIChatBackend(client, ["http://o"], "m").stream(_prompt(), GenerationParams())
        await stream.__anext__()
        assert fake.closed == 0
        await stream.aclose()
    assert fake.closed == 1


async def test_failover_before_the_first_byte() -> None:
    hosts: list[str] = []
    good = Recorded("07b_chat_stream", "llamacpp")

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "down":
            return httpx.Response(502, json={"error": {"message": "bad gateway"}})
        return good(request)

    chunks = await _collect(httpx.MockTransport(handler), urls=["http://down", "http://up"])
    assert hosts == ["down", "up"] and _text(chunks) == ANSWER


async def test_ready_lists_models_with_the_key() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        return httpx.Response(200 if request.url.host == "up" else 401, json={"data": []})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        assert await OpenAIChatBackend(client, ["http://down/v1", "http://up:8000"], "m",
                                       api_key="sk-1").ready()
        assert not await OpenAIChatBackend(client, ["http://down/v1"], "m").ready()
    assert seen[:2] == [("http://down/v1/models", "Bearer sk-1"), ("http://up:8000/v1/models", "Bearer sk-1")]


def test_capabilities_are_honest() -> None:
    caps = OpenAIChatBackend.capabilities
    assert (caps.prompt, caps.chat, caps.token_ids, caps.n) == (False, True, False, False)
    assert (caps.logprobs, caps.max_top_logprobs, caps.seed, caps.json_schema, caps.images) == (
        True, 20, True, True, True)
