"""adapters/passthrough.py: each backend's client-prompt request body and stream reader, and
embeddings' errors (adapters/base.py ``status_error``: llama.cpp's over-long input)."""

from __future__ import annotations

import httpx
import pytest

from adapters.base import status_error
from adapters.llamacpp import LlamaCppBackend
from adapters.ollama import OllamaBackend
from adapters.openai_chat import OpenAIChatBackend
from adapters.passthrough import (
    LlamaCppPassthrough,
    NotSupported,
    OllamaGenerateDialect,
    OpenAICompletionsDialect,
    VLLMCompletionsDialect,
    openai_embeddings,
    passthrough,
)
from adapters.vllm import VLLMBackend
from app.core.conversation import GenerationParams
from app.core.errors import ContextLengthExceeded, InvalidRequest, UpstreamError
from app.core.output import Finish
from app.core.prompt import Prompt
from tests.support.wire import load

PARAMS = GenerationParams(max_tokens=8, temperature=0.5, seed=1, logprobs=True, top_logprobs=0)


def test_vllm_keeps_its_own_special_token_default() -> None:
    body = VLLMCompletionsDialect("tiny").request_body(Prompt(None, text="hi", stop_strings=("x",)), PARAMS)
    assert body["prompt"] == "hi" and body["model"] == "tiny" and body["stop"] == ["x"]
    assert "skip_special_tokens" not in body
    assert body["logprobs"] == 0 and body["max_tokens"] == 8 and body["return_token_ids"] is True


def test_openai_completions_body_and_url() -> None:
    dialect = OpenAICompletionsDialect("gpt-x", {"authorization": "Bearer k"})
    body = dialect.request_body(Prompt((1, 2, 3)), GenerationParams(max_tokens=4, user="u"))
    assert body == {"model": "gpt-x", "prompt": [1, 2, 3], "stream": True, "max_tokens": 4,
                    "stream_options": {"include_usage": True}, "user": "u"}
    assert dialect.url("https://api.example.com/v1") == "https://api.example.com/v1/completions"
    assert dialect.url("http://h:8000") == "http://h:8000/v1/completions"
    assert dialect.headers() == {"authorization": "Bearer k"}


def test_openai_completions_reader_on_a_vllm_recording() -> None:
    reader = OpenAICompletionsDialect("m", {}).reader()
    events = load("05d_completions_tokenids_stream_max_tokens3", "vllm")["derived"]["sse_events"]
    chunks = [reader.chunk(e["data_json"]) for e in events if e.get("data_json")]
    assert "".join(c.text for c in chunks) == "<|channel|>final<|message|>"
    assert [c.finish for c in chunks if c.finish] == [Finish("length")]


def test_ollama_generate_is_raw() -> None:
    dialect = OllamaGenerateDialect("llama3")
    body = dialect.request_body(Prompt(None, text="[INST] hi", stop_strings=("\n",)), PARAMS)
    assert body == {"model": "llama3", "prompt": "[INST] hi", "raw": True, "stream": True,
                    "options": {"num_predict": 8, "temperature": 0.5, "seed": 1, "stop": ["\n"]}}
    reader = dialect.reader()
    assert reader.chunk({"response": "He", "done": False}).text == "He"
    last = reader.chunk({"response": "", "done": True, "done_reason": "length",
                         "prompt_eval_count": 5, "eval_count": 8})
    assert last.finish == Finish("length") and last.usage is not None
    assert last.usage.prompt_tokens == 5 and reader.is_last({"done": True})
    with pytest.raises(UpstreamError):
        reader.chunk({"error": "model crashed"})


def test_passthrough_per_backend() -> None:
    client = httpx.AsyncClient()
    assert isinstance(passthrough(LlamaCppBackend(client, ["http://l"])), LlamaCppPassthrough)
    assert passthrough(VLLMBackend(client, ["http://v"], "tiny")).model == "tiny"
    assert passthrough(OllamaBackend(client, ["http://o"], "m")).capabilities.logprobs is False
    assert passthrough(OpenAIChatBackend(client, ["http://x"], "m")).capabilities.max_top_logprobs == 5
    with pytest.raises(NotSupported):
        passthrough(object())


async def test_ollama_refuses_token_ids() -> None:
    through = passthrough(OllamaBackend(httpx.AsyncClient(), ["http://o"], "m"))
    with pytest.raises(InvalidRequest):
        await through.prompt((1, 2), ())
    assert (await through.prompt("hi", ("x",))).text == "hi"


def test_openai_embeddings_are_checked() -> None:
    vectors, tokens = openai_embeddings({"data": [{"index": 0, "embedding": [1, 2.5]}],
                                         "usage": {"prompt_tokens": 2}}, 1, "x")
    assert vectors == [[1.0, 2.5]] and tokens == 2
    for bad in ({}, {"data": []}, {"data": [{"index": 3, "embedding": [1]}]},
                {"data": [{"index": 0, "embedding": [[1.0], [2.0]]}]},
                {"data": [{"index": 0, "embedding": [True]}]}):
        with pytest.raises(UpstreamError):
            openai_embeddings(bad, 1, "x")


# Recorded from llama.cpp (xllamacpp 2026.10.11549) serving all-MiniLM-L6-v2 as `serve --embedded`
# does (512-token batch), for one input of 602 tokens: a 500, though the input is at fault.
TOO_LARGE = (b'{"error":{"code":500,"message":"input (602 tokens) is too large to process. increase '
             b'the physical batch size (current batch size: 512)","type":"server_error"}}')
VLLM_TOO_LONG = {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                 "message": "This model's maximum context length is 512 tokens. However, you "
                            "requested 602 tokens in the input for embedding generation."}


def test_llama_cpp_too_large_to_process_is_a_context_length_400() -> None:
    error = status_error(500, TOO_LARGE, httpx.Headers({"content-type": "application/json"}))
    assert isinstance(error, ContextLengthExceeded) and error.status == 400
    assert error.code == "context_length_exceeded" and "602 tokens" in error.message
    # any other 500 of llama.cpp stays the backend's failure
    other = status_error(500, b'{"error":{"code":500,"message":"failed to decode","type":"server_error"}}',
                         httpx.Headers())
    assert type(other) is UpstreamError and other.status == 502


@pytest.mark.parametrize(("backend", "answer"), [
    ("llamacpp", httpx.Response(500, content=TOO_LARGE, headers={"content-type": "application/json"})),
    ("vllm", httpx.Response(400, json=VLLM_TOO_LONG)),
])
async def test_an_over_long_embedding_input_is_a_400_naming_input(backend: str, answer: httpx.Response,
                                                                   ) -> None:
    calls: list[str] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return answer

    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    made = LlamaCppBackend(client, ["http://l"]) if backend == "llamacpp" else \
        VLLMBackend(client, ["http://v"], "tiny")
    with pytest.raises(ContextLengthExceeded) as raised:
        await passthrough(made).embed(["word " * 600], None)
    assert raised.value.status == 400 and raised.value.param == "input"
    assert raised.value.message.startswith("An input does not fit the model's context")
    assert calls == ["/v1/embeddings"]  # deterministic: asked once
