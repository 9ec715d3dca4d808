#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy --strict, pytest
# (unit tests + integration tests against a real llama.cpp server from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# Real clients from npm for the integration tests (tests/integration/test_codex_cli.py).
CODEX_VERSION=0.169.0
if [ ! -x .cache/codex/node_modules/.bin/codex ] || \
   ! grep -q "\"version\": \"$CODEX_VERSION\"" .cache/codex/node_modules/@openai/codex/package.json; then
  mkdir -p .cache/codex
  npm install --prefix .cache/codex --no-audit --no-fund --loglevel=error "@openai/codex@$CODEX_VERSION" >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
