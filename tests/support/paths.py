"""Where the repository and its test fixtures are, for tests at any depth; and the repository's
``scripts/NAME.py`` imported as module ``NAME`` (:func:`script`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def script(name: str) -> ModuleType:
    """``scripts/NAME.py`` as the module ``NAME`` (executed once: the first import is kept)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
