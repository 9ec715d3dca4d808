"""Config file + environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import load_config
from tests.support.paths import ROOT


def test_example_config_loads() -> None:
    cfg = load_config(ROOT / "config.example.toml", env={})
    model = cfg.models["gpt-oss-20b"]
    assert model.backend == "llamacpp" and model.base_urls == ["http://127.0.0.1:8080"]
    assert model.context_window == 8192 and model.defaults.reasoning_effort == "medium"


def test_generic_env_overrides_win_over_file() -> None:
    cfg = load_config(ROOT / "config.example.toml", env={
        "OCMGW__models__gpt-oss-20b__context_window": "16384",
        "OCMGW__models__gpt-oss-20b__base_urls": '["http://a:1", "http://b:2"]',
        "OCMGW__upstream__read_timeout": "30",
        "OCMGW_PORT": "9001",
    })
    assert cfg.port == 9001 and cfg.upstream.read_timeout == 30.0
    assert cfg.models["gpt-oss-20b"].context_window == 16384
    assert cfg.models["gpt-oss-20b"].base_urls == ["http://a:1", "http://b:2"]


def test_env_names_without_hyphens_reach_hyphenated_models() -> None:
    """A shell cannot ``export OCMGW__models__gpt-oss-20b__...``: ``_`` stands for ``-`` / ``.``."""
    cfg = load_config(ROOT / "config.example.toml", env={
        "OCMGW__models__gpt_oss_20b__context_window": "16384",
        "OCMGW__models__GPT_OSS_20B__defaults__max_tokens": "99",
        "OCMGW__models__new_model__base_urls": '["http://n:1"]',
    })
    assert set(cfg.models) == {"gpt-oss-20b", "new_model"}
    assert cfg.models["gpt-oss-20b"].context_window == 16384
    assert cfg.models["gpt-oss-20b"].defaults.max_tokens == 99
    # OCMGW_MODEL names the file's model in any spelling, rather than adding a second one.
    cfg = load_config(ROOT / "config.example.toml", env={"OCMGW_MODEL": "gpt_oss_20b",
                                                         "OCMGW_BACKEND_URL": "http://z:1"})
    assert list(cfg.models) == ["gpt-oss-20b"] and cfg.models["gpt-oss-20b"].base_urls == ["http://z:1"]


def test_single_model_from_env_without_file() -> None:
    cfg = load_config(None, env={"OCMGW_MODEL": "gpt-oss", "OCMGW_BACKEND_URL": "http://x:8080, http://y:8080",
                                 "OCMGW_CONTEXT_WINDOW": "4096"})
    assert cfg.models["gpt-oss"].base_urls == ["http://x:8080", "http://y:8080"]
    assert cfg.models["gpt-oss"].context_window == 4096


def test_config_file_from_env_var(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[models.m]\nbase_urls = ["http://h:1"]\n')
    assert list(load_config(None, env={"OCMGW_CONFIG": str(path)}).models) == ["m"]


@pytest.mark.parametrize("text", [
    '[models.m]\nbase_urls = []\n',
    '[models.m]\nbase_urls = ["http://h"]\nbackend = "nope"\n',
    '[models.m]\nbase_urls = ["http://h"]\ntypo_field = 1\n',
    '[models.m]\nbase_urls = ["http://h"]\ngguf = "/no/such/model.gguf"\n',
    '[models.m]\nbase_urls = ["http://h"]\nbackend = "vllm"\ngguf = "/etc/hostname"\n',
])
def test_bad_config_is_rejected(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ValidationError):
        load_config(path, env={})


def test_gguf_names_an_existing_file_for_llamacpp(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = tmp_path / "c.toml"
    path.write_text(f'[models.m]\nbase_urls = ["http://h"]\ngguf = "{tmp_path / "m.gguf"}"\n')
    assert load_config(path, env={}).models["m"].gguf == str(tmp_path / "m.gguf")


def test_commented_example_models_are_valid(tmp_path: Path) -> None:
    """The commented-out models in config.example.toml stay valid when uncommented."""
    import re

    text = (ROOT / "config.example.toml").read_text()
    cut = text.index("# A model with its own Jinja chat template")
    head, models = text[:cut], text[cut:]
    lines = head.splitlines() + [re.sub(r"^# (?=\[|[a-z_]+ = )", "", line) for line in models.splitlines()]
    # keep one template source: the example lists `path` as the alternative to from_backend
    lines = [line for line in lines if not line.startswith('path = "qwen3.jinja"')]
    (tmp_path / "all.toml").write_text("\n".join(lines))
    cfg = load_config(tmp_path / "all.toml", env={})
    assert {name: m.prompt_format for name, m in cfg.models.items()} == {
        "gpt-oss-20b": "harmony", "qwen3-8b": "template", "ocml-model": "openchatml",
        "qwen3": "chat", "gpt-4.1-mini": "chat"}
