"""/tokenize, /detokenize and /v1/embeddings in-process, upstream replayed from recordings."""

from __future__ import annotations

import base64
import struct

from tests.support.gateway import config
from tests.unit.api.completions.upstream import Upstream, post, vllm_config

RAW = "<|start|>user<|message|>hi<|end|><|start|>assistant"
IDS = [200006, 1428, 200008, 3686, 200007, 200006, 173781]
TEMPLATE = {"prompt_format": "template", "template": {"builtin": "gemma3"}}


async def test_vllm_tokenize_and_detokenize_pass_through() -> None:
    up = Upstream({"/tokenize": "vllm/08b_tokenize_return_token_strs", "/detokenize": "vllm/08c_detokenize"})
    cfg = vllm_config(prompt_format="openchatml")
    status, body = await post(up, "/tokenize", {"prompt": RAW, "add_special_tokens": False,
                                                "return_token_strs": True}, cfg)
    assert status == 200
    assert body["tokens"] == IDS and body["count"] == 7
    assert body["token_strs"][:3] == ["<|start|>", "user", "<|message|>"]
    assert up.bodies("/tokenize") == [{"model": "tiny", "prompt": RAW, "add_special_tokens": False,
                                       "return_token_strs": True}]
    status, body = await post(up, "/detokenize", {"tokens": IDS}, cfg)
    assert status == 200 and body == {"prompt": RAW}


async def test_llamacpp_tokenize_and_detokenize() -> None:
    up = Upstream({"/tokenize": "llamacpp/06c_tokenize_parse_special_true_with_pieces",
                   "/detokenize": "llamacpp/06d_detokenize"})
    cfg = config(**TEMPLATE)
    status, body = await post(up, "/tokenize", {"prompt": RAW, "return_token_strs": True}, cfg)
    assert status == 200 and body["tokens"] == IDS and body["token_strs"][1] == "user"
    assert body["max_model_len"] == 4096
    assert up.bodies("/tokenize")[0] == {"content": RAW, "add_special": True, "parse_special": True,
                                         "with_pieces": True}
    status, body = await post(up, "/detokenize", {"tokens": IDS}, cfg)
    assert status == 200 and body == {"prompt": RAW}


async def test_harmony_models_use_the_gateways_tokenizer() -> None:
    up = Upstream({})
    status, body = await post(up, "/tokenize", {"prompt": RAW, "return_token_strs": True})
    assert status == 200
    assert body == {"count": 7, "max_model_len": 4096, "tokens": IDS,
                    "token_strs": ["<|start|>", "user", "<|message|>", "hi", "<|end|>", "<|start|>",
                                   "assistant"]}
    status, body = await post(up, "/detokenize", {"tokens": IDS})
    assert status == 200 and body == {"prompt": RAW}
    status, body = await post(up, "/detokenize", {"tokens": [300000]})
    assert status == 400 and body["error"]["param"] == "tokens"
    assert up.requests == []


async def test_tokenize_errors() -> None:
    up = Upstream({})
    for path, body, param in [("/tokenize", {}, "prompt"), ("/tokenize", {"prompt": 3}, "prompt"),
                              ("/detokenize", {"tokens": [-1]}, "tokens[0]"),
                              ("/detokenize", {"tokens": "x"}, "tokens"),
                              ("/tokenize", {"prompt": "x", "model": "nope"}, "model")]:
        status, answer = await post(up, path, body)
        assert status in (400, 404) and answer["error"]["param"] == param, (path, body, answer)
    ollama = config(backend="ollama", base_urls=["http://o.test:11434"], upstream_model="m")
    status, answer = await post(up, "/tokenize", {"prompt": "x"}, ollama)
    assert status == 400 and answer["error"]["code"] == "unsupported_endpoint"


EMBEDDING = {"object": "list", "model": "tiny", "usage": {"prompt_tokens": 3, "total_tokens": 3},
             "data": [{"object": "embedding", "index": 1, "embedding": [0.5, -1.0]},
                      {"object": "embedding", "index": 0, "embedding": [0.25, 2.0]}]}


async def test_embeddings_pass_through_in_input_order() -> None:
    up = Upstream({"/v1/embeddings": (200, EMBEDDING)})
    status, body = await post(up, "/v1/embeddings", {"input": ["a", "b"]}, vllm_config())
    assert status == 200
    assert [d["embedding"] for d in body["data"]] == [[0.25, 2.0], [0.5, -1.0]]
    assert body["model"] == "gpt-oss-test" and body["usage"]["prompt_tokens"] == 3
    assert up.bodies("/v1/embeddings") == [{"model": "tiny", "input": ["a", "b"],
                                            "encoding_format": "float"}]


async def test_embeddings_base64_is_little_endian_float32() -> None:
    up = Upstream({"/v1/embeddings": (200, EMBEDDING)})
    status, body = await post(up, "/v1/embeddings", {"input": ["a", "b"], "encoding_format": "base64"})
    assert status == 200
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert struct.unpack("<2f", raw) == (0.25, 2.0)


async def test_llamacpp_without_embeddings_is_a_400_naming_model() -> None:
    not_supported = {"error": {"code": 501, "type": "not_supported_error", "message":
                               "This server does not support embeddings. Start it with `--embeddings`"}}
    up = Upstream({"/v1/embeddings": (501, not_supported)})
    status, body = await post(up, "/v1/embeddings", {"input": "a"})
    assert status == 400
    assert body["error"]["code"] == "unsupported_endpoint" and body["error"]["param"] == "model"
    assert "--embeddings" in body["error"]["message"]


async def test_an_input_too_long_for_llamacpp_is_a_400_context_length() -> None:
    """llama.cpp answers a 500 for it (tests/unit/adapters/test_passthrough.py has the recording);
    the public answer is a 400 naming input, not a 502 the SDKs would retry."""
    too_large = {"error": {"code": 500, "type": "server_error", "message": "input (602 tokens) is too "
                           "large to process. increase the physical batch size (current batch size: 512)"}}
    up = Upstream({"/v1/embeddings": (500, too_large)})
    status, body = await post(up, "/v1/embeddings", {"input": ["short", "word " * 600]})
    assert status == 400, body
    assert body["error"]["code"] == "context_length_exceeded" and body["error"]["param"] == "input"
    assert body["error"]["type"] == "invalid_request_error" and "602 tokens" in body["error"]["message"]
    assert len(up.bodies("/v1/embeddings")) == 1


async def test_ollama_embed() -> None:
    up = Upstream({"/api/embed": (200, {"model": "m", "embeddings": [[1, 2], [3, 4]],
                                        "prompt_eval_count": 4})})
    cfg = config(backend="ollama", base_urls=["http://o.test:11434"], upstream_model="m")
    status, body = await post(up, "/v1/embeddings", {"input": ["a", "b"]}, cfg)
    assert status == 200 and body["data"][1]["embedding"] == [3.0, 4.0]
    assert body["usage"]["prompt_tokens"] == 4
    status, body = await post(up, "/v1/embeddings", {"input": [1, 2]}, cfg)
    assert status == 400 and body["error"]["param"] == "input"


async def test_embeddings_bad_input() -> None:
    up = Upstream({})
    for body, param in [({"input": ""}, "input"), ({"input": []}, "input"), ({}, "input"),
                        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
                        ({"input": "a", "dimensions": 0}, "dimensions")]:
        status, answer = await post(up, "/v1/embeddings", body)
        assert status == 400 and answer["error"]["param"] == param, (body, answer)
    assert up.requests == []


async def test_upstream_garbage_is_a_502() -> None:
    up = Upstream({"/v1/embeddings": (200, {"data": [{"index": 0, "embedding": ["x"]}]})})
    status, body = await post(up, "/v1/embeddings", {"input": "a"})
    assert status == 502 and body["error"]["type"] == "server_error"


async def test_wrong_method_is_a_405() -> None:
    from tests.support.gateway import gateway

    async with gateway(Upstream({}).transport()) as client:
        for path in ("/tokenize", "/detokenize", "/v1/embeddings", "/v1/completions"):
            r = await client.get(path)
            assert r.status_code == 405 and r.headers["allow"] == "POST", path
            assert r.json()["error"]["code"] == "method_not_allowed"


async def test_llamacpp_dimensions_shorten_and_renormalize() -> None:
    """llama.cpp ignores ``dimensions``; the gateway cuts the vectors and scales them to unit
    length (as OpenAI's and Ollama's ``dimensions`` do) instead of passing it on silently."""
    vectors = {"object": "list", "model": "m", "usage": {"prompt_tokens": 2, "total_tokens": 2},
               "data": [{"object": "embedding", "index": 0, "embedding": [3.0, 4.0, 12.0]}]}
    up = Upstream({"/v1/embeddings": (200, vectors)})
    status, body = await post(up, "/v1/embeddings", {"input": "a", "dimensions": 2})
    assert status == 200 and body["data"][0]["embedding"] == [0.6, 0.8]
    assert "dimensions" not in up.bodies("/v1/embeddings")[0]
    status, body = await post(up, "/v1/embeddings", {"input": "a", "dimensions": 4})
    assert status == 400 and body["error"]["param"] == "dimensions"
