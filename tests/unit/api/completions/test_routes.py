"""/v1/completions end to end in-process, upstream replayed from the real recordings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from app.main import create_app
from tests.support.asgi import AsgiPost, eventually
from tests.support.gateway import MODEL, config, gateway
from tests.support.wire import load
from tests.unit.api.completions.upstream import Upstream, post, vllm_config

HARMONY_IDS = [200006, 1428, 200008, 3686, 200007, 200006, 173781]  # <|start|>user<|message|>hi...
RAW = "<|start|>user<|message|>hi<|end|><|start|>assistant"
ANSWER = "<|channel|>final<|message|>Hello from a scripted tiny model!"


def llama(completion: str = "llamacpp/03a_completion_tokenids_stream") -> Upstream:
    return Upstream({"/completion": completion, "/tokenize": "llamacpp/06a_tokenize_parse_special_true",
                     "/detokenize": "llamacpp/06d_detokenize"})


async def test_token_ids_go_upstream_as_they_are() -> None:
    up = llama()
    status, body = await post(up, "/v1/completions", {"prompt": HARMONY_IDS, "max_tokens": 32})
    assert status == 200
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["model"] == MODEL
    assert body["choices"] == [{"index": 0, "text": ANSWER, "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"]["prompt_tokens"] == 59 and body["usage"]["completion_tokens"] == 11
    sent = up.bodies("/completion")[0]
    assert sent["prompt"] == HARMONY_IDS and sent["n_predict"] == 32
    assert up.bodies("/tokenize") == []


async def test_text_prompt_is_tokenized_by_llamacpp_with_specials() -> None:
    """The client's text is the client's: its control tokens stay control tokens."""
    up = llama()
    status, _ = await post(up, "/v1/completions", {"prompt": RAW})
    assert status == 200
    assert up.bodies("/tokenize") == [{"content": RAW, "add_special": True, "parse_special": True,
                                       "with_pieces": False}]
    sent = up.bodies("/completion")[0]
    assert sent["prompt"] == HARMONY_IDS
    assert sent["n_predict"] == 16  # OpenAI's default for legacy completions


async def test_stream_chunks_usage_and_done() -> None:
    status, events = await post(llama(), "/v1/completions",
                                {"prompt": HARMONY_IDS, "stream": True,
                                 "stream_options": {"include_usage": True}})
    assert status == 200
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == ANSWER
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]
              and c["choices"][0]["finish_reason"]]
    assert finals == ["stop"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 70


async def test_stream_without_include_usage_has_no_usage() -> None:
    _, events = await post(llama(), "/v1/completions", {"prompt": HARMONY_IDS, "stream": True})
    assert all("usage" not in c for c in events[:-1])


async def test_logprobs_legacy_shape() -> None:
    up = llama("llamacpp/03b_completion_tokenids_stream_n_probs2")
    status, body = await post(up, "/v1/completions", {"prompt": HARMONY_IDS, "logprobs": 1})
    assert status == 200
    lp = body["choices"][0]["logprobs"]
    assert lp["tokens"][:3] == ["<|channel|>", "final", "<|message|>"]
    assert "".join(lp["tokens"]) == body["choices"][0]["text"]
    assert lp["text_offset"][:3] == [0, 11, 16]
    assert len(lp["token_logprobs"]) == len(lp["tokens"]) == len(lp["top_logprobs"])
    assert all(len(t) == 1 for t in lp["top_logprobs"])
    assert up.bodies("/completion")[0]["n_probs"] == 1


async def test_echo_prepends_the_prompt() -> None:
    status, body = await post(llama(), "/v1/completions", {"prompt": RAW, "echo": True})
    assert status == 200 and body["choices"][0]["text"] == RAW + ANSWER
    up = llama()
    status, events = await post(up, "/v1/completions",
                                {"prompt": HARMONY_IDS, "echo": True, "stream": True})
    assert status == 200 and events[0]["choices"][0]["text"] == RAW
    assert up.bodies("/detokenize") == []  # a Harmony model: the gateway's own o200k_harmony


async def test_vllm_text_prompt_is_forwarded_with_vllm_defaults() -> None:
    up = Upstream({"/v1/completions": "vllm/03_completions_tokenids_stream_usage"})
    status, body = await post(up, "/v1/completions", {"prompt": RAW, "max_tokens": 32, "seed": 3,
                                                     "stop": ["\n"], "user": "u1"}, vllm_config())
    assert status == 200
    assert body["choices"][0]["text"].startswith(ANSWER)
    sent = up.bodies("/v1/completions")[0]
    assert sent["prompt"] == RAW and sent["model"] == "tiny" and sent["max_tokens"] == 32
    assert "skip_special_tokens" not in sent  # vLLM's own default for client prompts
    assert sent["seed"] == 3 and sent["stop"] == ["\n"]
    assert body["usage"]["prompt_tokens"] == 59


async def test_vllm_logprobs() -> None:
    up = Upstream({"/v1/completions": "vllm/04b_completions_tokenids_stream_logprobs2_rerun"})
    status, body = await post(up, "/v1/completions", {"prompt": HARMONY_IDS, "logprobs": 2},
                              vllm_config())
    assert status == 200
    lp = body["choices"][0]["logprobs"]
    assert lp["tokens"][0] == "<|channel|>"
    assert lp["top_logprobs"][0] == {"<|channel|>": 0.0, "!": pytest.approx(-79.97, abs=0.01)}
    assert up.bodies("/v1/completions")[0]["logprobs"] == 2


async def test_stop_finish_and_length() -> None:
    status, body = await post(llama("llamacpp/04b_completion_tokenids_stream_stop"),
                              "/v1/completions", {"prompt": HARMONY_IDS, "stop": "scripted"})
    assert status == 200
    assert body["choices"][0]["text"] == "<|channel|>final<|message|>Hello from a "
    assert body["choices"][0]["finish_reason"] == "stop"
    status, body = await post(llama("llamacpp/04d_completion_tokenids_stream_n_predict3"),
                              "/v1/completions", {"prompt": HARMONY_IDS, "max_tokens": 3})
    assert body["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(("body", "param"), [
    ({"n": 9}, "n"),  # [limits] max_n
    ({"prompt": ["a"] * 5, "n": 2}, "prompt"),
    ({"best_of": 3}, "best_of"),
    ({"suffix": "x"}, "suffix"),
    ({"echo": True, "logprobs": 1}, "echo"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, -2]}, "prompt"),
    ({"prompt": [[1], []]}, "prompt"),
    ({"prompt": [300000]}, "prompt"),  # beyond o200k_harmony
    ({"prompt": 5}, "prompt"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 5000}, "max_tokens"),  # over the 4096 window
    ({"temperature": 3}, "temperature"),
    ({"logprobs": 21}, "logprobs"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"logit_bias": {"999999": 1}}, "logit_bias.999999"),
    ({"model": "nope"}, "model"),
])
async def test_bad_input_is_a_named_4xx(body: dict[str, object], param: str) -> None:
    up = llama()
    status, answer = await post(up, "/v1/completions", {"prompt": HARMONY_IDS, **body})
    assert status in (400, 404), answer
    assert answer["error"]["param"] == param, answer
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert up.bodies("/completion") == []


async def test_missing_prompt_and_bad_json() -> None:
    async with gateway(llama().transport()) as client:
        r = await client.post("/v1/completions", json={"model": MODEL})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
        r = await client.post("/v1/completions", content=b'{"model": ',
                              headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


async def test_backend_context_error_names_the_prompt() -> None:
    up = llama("llamacpp/05a_error_prompt_longer_than_context")
    status, body = await post(up, "/v1/completions", {"prompt": HARMONY_IDS})
    assert status == 400
    assert body["error"]["code"] == "context_length_exceeded" and body["error"]["param"] == "prompt"


async def test_ollama_refuses_token_ids_and_logprobs() -> None:
    cfg = config(backend="ollama", base_urls=["http://ollama.test:11434"], upstream_model="m")
    up = Upstream({})
    status, body = await post(up, "/v1/completions", {"prompt": HARMONY_IDS}, cfg)
    assert status == 400 and body["error"]["param"] == "prompt"
    status, body = await post(up, "/v1/completions", {"prompt": "hi", "logprobs": 1}, cfg)
    assert status == 400 and body["error"]["param"] == "logprobs"
    assert up.requests == []


class HeldBody(httpx.AsyncByteStream):
    """A recording's first chunk, then nothing until the connection is closed."""

    def __init__(self, first: bytes) -> None:
        self.first = first
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.first
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed.set()


async def test_client_disconnect_cancels_the_upstream_stream() -> None:
    chunks = load("03a_completion_tokenids_stream")["response"]["chunks"]
    body = HeldBody(chunks[0]["text"].encode())

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/completion":
            return httpx.Response(404)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    app = create_app(config(), transport=httpx.MockTransport(handler))
    async with app.router.lifespan_context(app):
        client = AsgiPost("/v1/completions", {"model": MODEL, "prompt": HARMONY_IDS, "stream": True})
        task = client.start(app)
        await eventually(lambda: client.body_chunks >= 1, 2.0)
        assert client.body_chunks >= 1  # the first text chunk reached the client
        client.gone.set()
        await asyncio.wait_for(body.closed.wait(), 2.0)  # the upstream response was closed
        await asyncio.wait_for(task, 2.0)


async def test_batch_and_n_are_choices_by_index() -> None:
    up = llama()
    status, body = await post(up, "/v1/completions", {"prompt": [HARMONY_IDS, HARMONY_IDS[:3]],
                                                     "n": 2, "seed": 7})
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert all(c["text"] == ANSWER for c in body["choices"])
    assert body["usage"]["completion_tokens"] == 44
    assert body["usage"]["prompt_tokens"] == 59 * 2  # each prompt once (the recording says 59)
    sent = up.bodies("/completion")
    assert sorted((b["prompt"] == HARMONY_IDS, b["seed"]) for b in sent) == [
        (False, 7), (False, 8), (True, 7), (True, 8)]


async def test_batch_stream_interleaves_choices_with_one_usage_and_done() -> None:
    status, events = await post(llama(), "/v1/completions",
                                {"prompt": ["a", "b"], "stream": True,
                                 "stream_options": {"include_usage": True}})
    assert status == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    texts = {0: "", 1: ""}
    for c in chunks:
        for choice in c["choices"]:
            texts[choice["index"]] += choice["text"]
    assert texts == {0: ANSWER, 1: ANSWER}
    assert [c for c in chunks if "usage" in c] == [chunks[-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 22
