"""The package's layers, as docs/architecture.md draws them, checked on the
source: each layer imports only the ones below it (``TYPE_CHECKING`` imports aside), and the
Responses and Conversations APIs share their item logic through ``app/items``, never by
importing each other both ways.  A new upward import fails here, naming the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# layer → the layers it must never import (run-time imports)
FORBIDDEN = {
    "core": {"formats", "adapters", "engine", "tools", "items", "stores", "knowledge", "http", "api",
             "cli", "main"},
    "formats": {"engine", "tools", "stores", "http", "api", "cli", "main"},
    "adapters": {"engine", "tools", "stores", "http", "api", "cli", "main"},
    "tools": {"engine", "http", "api", "cli", "main"},
    "items": {"engine", "http", "api", "cli", "main"},
    "stores": {"engine", "http", "api", "cli", "main"},
    "knowledge": {"engine", "batches", "http", "api", "cli", "main"},
    "batches": {"engine", "http", "api", "cli", "main"},
    "engine": {"http", "api", "cli", "main"},
    "metrics": {"engine", "http", "api", "cli", "main"},
    "http": {"api", "cli", "main"},
    "api": {"cli", "main"},
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "adapters":
        return "adapters"
    return parts[1] if parts[0] == "app" and len(parts) > 1 else None


def _runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, module)`` of every import not under ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _sources() -> list[Path]:
    return sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")])


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for path in _sources():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        layer = _layer(module)
        for line, target in _runtime_imports(ast.parse(path.read_text())):
            if _layer(target) in FORBIDDEN.get(layer or "", set()):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert wrong == []


def test_responses_and_conversations_do_not_import_each_other_both_ways() -> None:
    def imports(package: str) -> set[str]:
        out = set()
        for path in (ROOT / "app" / "api" / package).rglob("*.py"):
            out |= {target for _, target in _runtime_imports(ast.parse(path.read_text()))}
        return out

    to_conversations = any(t.startswith("app.api.conversations") for t in imports("responses"))
    to_responses = any(t.startswith("app.api.responses") for t in imports("conversations"))
    assert not (to_conversations and to_responses)


def test_the_check_sees_an_upward_import() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import app.api.x\n"
                     "import app.http.y\nfrom app.engine import z\n")
    assert _runtime_imports(tree) == [(1, "typing"), (4, "app.http.y"), (5, "app.engine")]
