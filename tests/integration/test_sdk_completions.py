"""The OpenAI SDK's legacy completions and embeddings, and /tokenize, /detokenize, through the
real gateway to a REAL llama.cpp server (scripted models: tests/support/scripted_gguf.py)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests.integration.conftest import run_gateway, write_config
from tests.support.fixtures import SCRIPT_FINAL
from tests.support.process import free_port, healthy_process
from tests.support.scripted_gguf import scripted_model

pytestmark = pytest.mark.integration

PROMPT = "<|start|>user<|message|>Say hello.<|end|><|start|>assistant"
ANSWER = "<|channel|>final<|message|>Hello from a scripted tiny model!"
MODEL = "scripted-final"


@pytest.fixture
def client(gateway_url: str) -> OpenAI:
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="not-needed", max_retries=0, timeout=60)


def test_text_prompt_is_the_clients_own(client: OpenAI) -> None:
    """Control tokens typed in a raw prompt are real control tokens: the client's choice."""
    done = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32)
    assert done.object == "text_completion" and done.id.startswith("cmpl-")
    assert done.choices[0].text == ANSWER
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.completion_tokens == 11


def test_token_ids_stream_with_usage(client: OpenAI, gateway_url: str) -> None:
    ids = httpx.post(f"{gateway_url}/tokenize", json={"model": MODEL, "prompt": PROMPT}).json()["tokens"]
    text, finishes, usage = "", [], None
    for chunk in client.completions.create(model=MODEL, prompt=ids, max_tokens=32, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.text
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    assert text == ANSWER and finishes == ["stop"]
    assert usage is not None and usage.prompt_tokens == len(ids)


def test_logprobs_echo_and_length(client: OpenAI) -> None:
    done = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, logprobs=2)
    lp = done.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and "".join(lp.tokens) == ANSWER
    assert lp.top_logprobs is not None and all(len(t) <= 2 for t in lp.top_logprobs)
    done = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, echo=True)
    assert done.choices[0].text == PROMPT + "<|channel|>final<|message|>"
    assert done.choices[0].finish_reason == "length"


def test_refusals_are_400s_naming_the_parameter(client: OpenAI) -> None:
    for kwargs, param in [({"n": 9}, "n"), ({"max_tokens": 100000}, "max_tokens"),
                          ({"echo": True, "logprobs": 1}, "echo"), ({"suffix": "x"}, "suffix")]:
        with pytest.raises(openai.BadRequestError) as err:
            client.completions.create(**{"model": MODEL, "prompt": PROMPT, **kwargs})  # type: ignore[call-overload]
        assert err.value.status_code == 400
        assert isinstance(err.value.body, dict) and err.value.body["param"] == param


def test_batch_and_n(client: OpenAI) -> None:
    done = client.completions.create(model=MODEL, prompt=[PROMPT, PROMPT], n=2, max_tokens=32,
                                     seed=1)
    assert [c.index for c in done.choices] == [0, 1, 2, 3]
    assert all(c.text == ANSWER and c.finish_reason == "stop" for c in done.choices)
    assert done.usage is not None and done.usage.completion_tokens == 44
    seen: dict[int, str] = {}
    for chunk in client.completions.create(model=MODEL, prompt=[PROMPT, PROMPT], max_tokens=32,
                                           stream=True):
        for choice in chunk.choices:
            seen[choice.index] = seen.get(choice.index, "") + choice.text
    assert seen == {0: ANSWER, 1: ANSWER}


def test_tokenize_matches_llamacpp_and_detokenize_round_trips(gateway_url: str) -> None:
    mine = httpx.post(f"{gateway_url}/tokenize", json={"model": MODEL, "prompt": PROMPT,
                                                       "return_token_strs": True}).json()
    assert mine["count"] == len(mine["tokens"]) and mine["token_strs"][0] == "<|start|>"
    back = httpx.post(f"{gateway_url}/detokenize", json={"model": MODEL, "tokens": mine["tokens"]})
    assert back.json() == {"prompt": PROMPT}


def test_embeddings_without_embeddings_server_is_a_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model=MODEL, input="hello")
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "unsupported_endpoint"


_EMBEDDING_SERVER = textwrap.dedent("""
    import sys, threading, xllamacpp
    p = xllamacpp.CommonParams()
    p.model.path = sys.argv[1]; p.port = int(sys.argv[2]); p.hostnames = ["127.0.0.1"]
    p.n_ctx = 512; p.n_parallel = 1; p.embedding = True  # --embeddings --pooling mean
    p.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    p.cpuparams.n_threads = 2; p.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(p)
    threading.Event().wait()
""")


@pytest.fixture(scope="module")
def embedding_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp started with ``--embeddings`` (a template model, tokenized by llama.cpp)."""
    tmp = tmp_path_factory.mktemp("embed")
    model = scripted_model("final", SCRIPT_FINAL)
    port = free_port()
    cmd = [sys.executable, "-c", _EMBEDDING_SERVER, str(model), str(port)]
    with healthy_process(cmd, f"http://127.0.0.1:{port}") as llama:
        config = write_config(tmp / "gateway.toml", {"embed": llama.url}, tmp / "r.sqlite3")
        text = config.read_text().replace('current_date = "2026-11-22"', "") + \
            '\n[models."embed".template]\nbuiltin = "gemma3"\n'
        text = text.replace('backend = "llamacpp"', 'backend = "llamacpp"\nprompt_format = "template"')
        Path(config).write_text(text)
        with run_gateway(config) as gateway:
            yield gateway.url


def test_embeddings_through_the_sdk(embedding_gateway: str) -> None:
    client = OpenAI(base_url=f"{embedding_gateway}/v1", api_key="x", max_retries=0, timeout=60)
    out = client.embeddings.create(model="embed", input=["hello", "world"])  # SDK asks base64
    assert [d.index for d in out.data] == [0, 1]
    assert len(out.data[0].embedding) == len(out.data[1].embedding) > 0
    floats = client.embeddings.create(model="embed", input="hello", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(out.data[0].embedding, rel=1e-5, abs=1e-6)
    assert out.usage.prompt_tokens > 0
    tokens = httpx.post(f"{embedding_gateway}/tokenize", json={"model": "embed", "prompt": "hello"})
    assert tokens.status_code == 200 and tokens.json()["count"] >= 1
