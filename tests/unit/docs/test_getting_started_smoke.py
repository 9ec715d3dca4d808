"""What the smoke test (scripts/smoke.py, phase ``site``) reads from the Getting-started page:
the quickstart command, the requests, the ``pip install`` lines and the Python examples; every
package a Python example imports is one the page tells the reader to install (the smoke then
runs the example in a venv holding only those)."""

from __future__ import annotations

import ast
import re
import sys

import pytest

from tests.support.paths import ROOT, script

# import name -> the distribution a `pip install` line names
DISTRIBUTIONS = {"agents": "openai-agents"}


smoke = script("smoke")


def _imports(code: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names)


def test_the_page_gives_the_smoke_a_quickstart_requests_and_a_python_example() -> None:
    page = smoke.page_examples((ROOT / smoke.GETTING_STARTED).read_text())
    assert any("pip install" in step for step in page.steps)
    assert page.serve.startswith(".venv/bin/ocm-gateway serve")
    assert page.requests and all("127.0.0.1:8000" in r for r in page.requests)
    assert page.pythons and all("127.0.0.1:8000" in code for code in page.pythons)


def test_every_package_a_python_example_imports_is_installed_by_the_page() -> None:
    page = smoke.page_examples((ROOT / smoke.GETTING_STARTED).read_text())
    installed = {word for line in page.installs for word in line.split()[2:] if not word.startswith("-")}
    for code in page.pythons:
        needed = {DISTRIBUTIONS.get(name, name) for name in _imports(code)}
        assert needed and needed <= installed, (needed, page.installs)


PAGE = """# Getting started

## Two commands

```sh
python3 -m venv .venv && \\
  .venv/bin/pip install -e . && .venv/bin/ocm-gateway serve --embedded m
```

## First requests

On port 8000:

```sh
curl -s http://127.0.0.1:8000/v1/models
```

{install}
```python
from openai import OpenAI
```

## Later

```sh
pip install something-else
```
"""


def test_the_blocks_are_sorted_into_installs_and_requests() -> None:
    page = smoke.page_examples(PAGE.format(install="```sh\npip install openai\n```\n"))
    assert page.steps == ["python3 -m venv .venv", ".venv/bin/pip install -e ."]
    assert page.serve == ".venv/bin/ocm-gateway serve --embedded m"
    assert page.requests == ["curl -s http://127.0.0.1:8000/v1/models\n"]
    assert page.installs == ["pip install openai"]  # not the one of a later section
    assert page.pythons == ["from openai import OpenAI\n"]


def test_a_python_example_without_its_pip_install_fails_the_smoke() -> None:
    with pytest.raises(smoke.SmokeFailure, match="must say what to pip install"):
        smoke.page_examples(PAGE.format(install=""))
    # a block that installs and also does something else is a request, not an install
    mixed = "```sh\npip install openai\ncurl -s http://127.0.0.1:8000/health\n```\n"
    with pytest.raises(smoke.SmokeFailure, match="must say what to pip install"):
        smoke.page_examples(PAGE.format(install=mixed))


def test_a_page_without_the_quickstart_section_is_named() -> None:
    message = re.escape("docs/getting-started.md has no '## Two commands'")
    with pytest.raises(smoke.SmokeFailure, match=message):
        smoke.page_examples("# Getting started\n")
