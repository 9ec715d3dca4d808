#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy --strict, pytest
# (unit tests + integration tests against a real llama.cpp server from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
