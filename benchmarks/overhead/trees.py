"""Gateway source trees (``--tree LABEL=PATH[,NAME=VALUE...]``): their entry point, environment
and commit; and the uvicorn worker count a gateway of that tree runs with (``--workers N``).

``NAME=VALUE`` pairs after the path are environment variables of that tree's processes, e.g.
gateway settings: ``--tree a=.,OCMGW__http__protocol=h11 --tree b=.,OCMGW__http__protocol=httptools``
compares two settings of one tree."""

from __future__ import annotations

import argparse
import os
import subprocess
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # this checkout (the default tree)


@dataclass(frozen=True)
class Tree:
    """A source tree to run the gateway from, and its ``ocm-gateway`` entry point
    (``module:function``, from the tree's ``pyproject.toml``: the layout changes between trees),
    served by ``workers`` uvicorn worker processes; ``nodelay``: with the listening socket made
    with ``IPPROTO_TCP`` (see :mod:`.processes`)."""

    label: str
    path: Path
    entry: str
    workers: int = 1
    nodelay: bool = False
    env: tuple[tuple[str, str], ...] = ()

    def with_workers(self, workers: int, nodelay: bool = False) -> Tree:
        """The same tree run with ``workers`` worker processes, labelled ``LABEL-wN[-nodelay]``."""
        suffix = "-nodelay" if nodelay else ""
        return replace(self, label=f"{self.label}-w{workers}{suffix}", workers=workers,
                       nodelay=nodelay)

    @classmethod
    def at(cls, label: str, path: Path) -> Tree:
        pyproject = path / "pyproject.toml"
        try:
            entry = tomllib.loads(pyproject.read_text())["project"]["scripts"]["ocm-gateway"]
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"no ocm-gateway entry point in {pyproject} ({exc!r})") from exc
        return cls(label, path, str(entry))


def tree_env(tree: Tree) -> dict[str, str]:
    """The environment of a process running ``tree``'s code: no gateway settings of ours, and
    ``tree`` first on the import path (ahead of the venv's editable install, if any)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMGW")}
    env["PYTHONPATH"] = str(tree.path)
    return env | dict(tree.env)


def git_commit(path: Path) -> str:
    """The short commit of the tree at ``path``, ``+dirty`` when its app/ or adapters/ differ."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "app", "adapters"], cwd=path,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parse_tree(value: str) -> Tree:
    """``--tree LABEL=PATH[,NAME=VALUE...]``: a gateway source tree (with an ``ocm-gateway``
    entry point), and environment variables for its processes."""
    label, sep, rest = value.partition("=")
    path, *pairs = rest.split(",")
    env = [pair.partition("=") for pair in pairs]
    if not sep or not label or not path or any(not name or not eq for name, eq, _ in env):
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH[,NAME=VALUE...], got {value!r}")
    try:
        tree = Tree.at(label, Path(path).expanduser().resolve())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return replace(tree, env=tuple((name, val) for name, _, val in env))
