"""Import graph of the gateway by package (internal imports only).

``python3 scripts/imports.py [ROOT]`` prints each package of ``app``, ``adapters`` and
``schemas`` with the packages it imports and how many import statements do; modules at the
root of ``app`` count as one package.  DEVELOPERS.md describes the intended graph.
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

OURS = ("app", "adapters", "schemas")


def package(root: Path, module: str) -> str:
    parts = module.split(".")
    if parts[0] != "app":
        return parts[0]
    if len(parts) >= 2 and (root / "app" / parts[1]).is_dir():
        if len(parts) >= 3 and (root / "app" / parts[1] / parts[2]).is_dir():
            return f"app/{parts[1]}/{parts[2]}"
        return f"app/{parts[1]}"
    return "app (root modules)"


def imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        if node.module == "app":  # from app import metrics
            return [f"app.{alias.name}" for alias in node.names]
        return [node.module]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def graph(root: Path) -> dict[tuple[str, str], int]:
    edges: collections.Counter[tuple[str, str]] = collections.Counter()
    files = [f for top in OURS for f in (root / top).rglob("*.py")]
    for path in files:
        source = package(root, ".".join(path.relative_to(root).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for name in imported(node):
                if name.split(".")[0] in OURS and (target := package(root, name)) != source:
                    edges[(source, target)] += 1
    return dict(edges)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    by_source: dict[str, list[str]] = collections.defaultdict(list)
    for (source, target), count in sorted(graph(root).items()):
        by_source[source].append(f"{target}({count})")
    for source in sorted(by_source):
        print(f"{source:24} -> {', '.join(by_source[source])}")


if __name__ == "__main__":
    main()
