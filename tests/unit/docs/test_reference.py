"""The generated reference pages and the example configuration against the config model.

``docs/reference/configuration.md`` and ``docs/reference/api.md`` are what
``scripts/gen_reference.py`` writes today (a change to ``app/config.py`` or a route without
regenerating fails here, saying which command to run); every key of the config model has a
description; ``config.example.toml`` shows every section of the model, names only keys that
exist, loads with the real loader and, outside ``[models]`` and ``[store]``, sets nothing but
defaults (what would change behaviour is commented out).
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from app.config import GatewayConfig, load_config
from tests.support.paths import ROOT, script

EXAMPLE = ROOT / "config.example.toml"


gen = script("gen_reference")


@pytest.fixture(scope="module")
def document() -> dict[str, typing.Any]:
    return typing.cast(dict[str, typing.Any], gen.openapi_document())


def test_the_committed_configuration_reference_is_the_generators_output() -> None:
    committed = (ROOT / gen.CONFIG_PAGE).read_text() if (ROOT / gen.CONFIG_PAGE).exists() else ""
    assert committed == gen.config_reference(), (
        f"{gen.CONFIG_PAGE} is stale: run `{gen.COMMAND}` and commit the result")


def test_the_committed_api_reference_is_the_generators_output(document: dict[str, typing.Any]) -> None:
    committed = (ROOT / gen.API_PAGE).read_text() if (ROOT / gen.API_PAGE).exists() else ""
    assert committed == gen.api_reference(document), (
        f"{gen.API_PAGE} is stale: run `{gen.COMMAND}` and commit the result")


def test_every_config_key_has_a_description() -> None:
    assert gen.undocumented_keys() == [], "describe these keys in app/config.py: Field(description=...)"


def test_a_key_without_a_description_is_reported() -> None:
    class Inner(BaseModel):
        """A table."""

        told: int = Field(default=1, description="Has one.")
        silent: int = 2

    class Outer(BaseModel):
        inner: Inner = Inner()
        items: list[Inner] = []
        bare: str = ""

    assert gen.undocumented_keys(Outer) == ["(top level).bare", "inner.silent", "items.silent"]


def test_the_configuration_reference_lists_every_key_of_every_section() -> None:
    page = gen.config_reference()
    sections = list(gen.config_sections())
    assert len(sections) >= 20  # the walk reaches nested tables, not only GatewayConfig
    paths = {path for path, _, _ in sections}
    assert {"auth.keys", "auth.keys.budget", "tools.mcp.servers.NAME", "models.NAME.template",
            "admin", "usage", "redis"} <= paths
    for path, array, model in sections:
        heading = gen._heading(path, array)
        body = page.split(f" {heading}\n", 1)[1].split("\n#", 1)[0]  # this section, to the next heading
        for name, field in model.model_fields.items():
            row = next((line for line in body.splitlines() if line.startswith(f"| `{name}` |")), None)
            assert row is not None, f"{heading}: no row for {name}"
            assert gen.inline(gen.field_text(field), cell=True) in row


def test_the_api_reference_lists_every_path_and_method(document: dict[str, typing.Any]) -> None:
    page = gen.api_reference(document)
    operations = [(path, method) for path, ops in document["paths"].items() for method in ops
                  if method in gen.METHODS]
    assert len(operations) >= 60
    for path, method in operations:
        assert f"### `{method.upper()} {path}`\n" in page, (method, path)
    # request bodies by schema name, with a section of their fields
    link = "[`ChatCompletionRequest`](#chatcompletionrequest)"
    assert f"Request body (required): application/json {link}" in page
    assert "### `ChatCompletionRequest`\n" in page and "| `messages` |" in page


def test_the_output_depends_on_the_code_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             document: dict[str, typing.Any]) -> None:
    first = gen.config_reference(), gen.api_reference(document)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OCMGW__limits__max_queue", "7")
    assert (gen.config_reference(), gen.api_reference(gen.openapi_document())) == first


def test_check_mode_names_a_stale_page_and_writing_fixes_it(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "pages", lambda: {gen.CONFIG_PAGE: gen.config_reference})
    assert gen.main(["--check"]) == 1
    assert f"stale: {gen.CONFIG_PAGE}; run `{gen.COMMAND}`" in capsys.readouterr().err
    assert not (tmp_path / gen.CONFIG_PAGE).exists()
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    (tmp_path / gen.CONFIG_PAGE).write_text((tmp_path / gen.CONFIG_PAGE).read_text() + "edited\n")
    assert gen.main(["--check"]) == 1


# --- config.example.toml ---------------------------------------------------------------------

def _model_at(parts: list[str]) -> tuple[str, type[BaseModel] | None]:
    """The section ``parts`` names in the config model: its canonical path (names of tables of
    tables as ``NAME``) and model, or None for a table of plain values ([aliases])."""
    model: type[BaseModel] = GatewayConfig
    canonical: list[str] = []
    rest = list(parts)
    while rest:
        part = rest.pop(0)
        assert part in model.model_fields, f"[{'.'.join(parts)}]: no key {part!r} in the config model"
        inner, _, _ = gen._unwrap(model.model_fields[part].annotation)
        canonical.append(part)
        origin, args = typing.get_origin(inner), typing.get_args(inner)
        if origin is list:
            inner = gen._unwrap(args[0])[0]
        elif origin is dict:
            inner = gen._unwrap(args[1])[0]
            if not gen._is_model(inner):
                return ".".join(canonical), None
            assert rest, f"[{'.'.join(parts)}]: a name is expected after {part}"
            rest.pop(0)
            canonical.append("NAME")
        assert gen._is_model(inner), f"[{'.'.join(parts)}]: {part} is not a table"
        model = inner
    return ".".join(canonical), model


def _example_sections() -> dict[str, list[str]]:
    """Each section of the example, commented out or not, with the keys its lines set."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in EXAMPLE.read_text().splitlines():
        header = re.match(r"^(?:# ?)?\[\[?([^\]]+)\]\]?\s*(#|$)", line)
        key = re.match(r"^(?:# ?)?([a-z_][a-z0-9_]*)\s*=\s*\S", line)
        if header:
            current = header[1].strip()
            sections.setdefault(current, [])
        elif key:
            sections[current].append(key[1])
    return sections


def test_the_example_has_every_section_of_the_config_model() -> None:
    shown = {}
    for section, keys in _example_sections().items():
        parts = re.findall(r'"[^"]*"|[^.\s]+', section)
        path, model = _model_at([p.strip('"') for p in parts]) if section else ("", GatewayConfig)
        shown[path] = section
        if model is not None:
            unknown = [k for k in keys if k not in model.model_fields]
            assert not unknown, f"config.example.toml [{section}]: no such key {unknown}"
    wanted = [path for path, _, _ in gen.config_sections()]
    missing = [path for path in wanted if path not in shown]
    assert not missing, f"config.example.toml lacks the sections {missing} (commented out is fine)"
    assert "key_cache_seconds" in _example_sections()["auth"]


def test_the_example_loads_and_sets_only_defaults_outside_models_and_store() -> None:
    cfg = load_config(EXAMPLE, env={})
    assert "gpt-oss-20b" in cfg.models and cfg.models["gpt-oss-20b"].prompt_format == "harmony"
    outside = {"models", "store"}
    assert cfg.model_dump(exclude=outside) == GatewayConfig().model_dump(exclude=outside), (
        "a live line of config.example.toml changes behaviour: comment it out")
    text = EXAMPLE.read_text()
    for section in ("[admin]", "[usage]", "[tools]", "[auth]"):  # live, with their defaults
        assert re.search(rf"^{re.escape(section)}", text, re.M), section
    assert re.search(r"^# \[redis\]", text, re.M)  # a url would share limits: commented
