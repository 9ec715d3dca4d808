"""``ocm-gateway`` explains itself: ``--help`` at every level of the parser tree (walked from the
parser, so a new subcommand is covered without editing this file) exits 0 with plain text and
its usage line; every subcommand is listed by its parent; ``--config`` is accepted before and
after a ``keys`` action; ``--version``; errors that name the fix."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest

from app.cli.main import main
from app.cli.parser import build_parser, subparsers

RST = re.compile(r"``|:(mod|class|func|meth|attr|data|ref):`")


def _tree(path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    parser = build_parser()
    for name in path:
        parser = subparsers(parser)[name]
    return [path, *(p for name in subparsers(parser) for p in _tree((*path, name)))]


COMMANDS = _tree()


def test_the_tree_has_every_command_and_action() -> None:
    top = {p[0] for p in COMMANDS if len(p) == 1}
    assert top == {"serve", "keys", "transcript", "template", "conformance", "sandbox"}
    assert {p[1] for p in COMMANDS if p[:1] == ("keys",) and len(p) == 2} == {
        "create", "list", "show", "update", "revoke", "rotate"}


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ocm-gateway")
def test_help_is_plain_and_lists_its_subcommands(path: tuple[str, ...],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: " + " ".join(("ocm-gateway", *path)))
    assert not RST.search(out), RST.search(out)
    children = [p[len(path)] for p in COMMANDS if len(p) == len(path) + 1 and p[:len(path)] == path]
    for child in children:
        assert re.search(rf"^\s+{re.escape(child)}\s+\S", out, re.M), f"{child} missing from help"
    body = out.split("\n\n", 1)[1]  # after the usage: a description, options
    assert body.strip() and "-h, --help" in body


def test_a_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: ocm-gateway" in capsys.readouterr().err


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ocm-gateway {metadata.version('ocm-gateway')}"


@pytest.mark.parametrize("where", ["before", "after"])
def test_keys_take_config_before_or_after_the_action(where: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "s.sqlite3"}"\n')
    opts = ["--config", str(config), "--json"]
    create = ["create", "team-a", "--rpm", "7"]
    argv = ["keys", *opts, *create] if where == "before" else ["keys", *create, *opts]
    assert main(argv) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["name"] == "team-a" and made["requests_per_minute"] == 7
    listed = ["list", *opts] if where == "after" else [*opts, "list"]
    assert main(["keys", *listed]) == 0
    assert [k["id"] for k in json.loads(capsys.readouterr().out)] == [made["id"]]


def test_an_action_does_not_clobber_config_given_before_it(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert main(["keys", "--config", str(missing), "list"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "--config" in err and "config.example.toml" in err


@pytest.mark.parametrize("argv", [["serve", "--config"], ["keys", "list", "--config"]])
def test_a_missing_config_file_names_the_fix(argv: list[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OCMGW_CONFIG", "")  # serve sets it; restored after the test
    missing = tmp_path / "nope.toml"
    assert main([*argv, str(missing)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"cannot read the config file {missing}" in err and "No such file" in err
    assert "Pass --config with the path of an existing TOML file" in err


def test_template_without_analyze_still_analyzes(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.jinja"
    assert main(["template", str(missing)]) == 2
    assert f"cannot read {missing}" in capsys.readouterr().err


def test_an_unknown_model_name_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--embedded", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "no such model file: no-such-model" in err and "path of a .gguf file" in err
    assert "smollm2-135m" in err


def test_a_usage_error_says_which_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ocm-gateway keys create") and "name" in err.splitlines()[-1]
