#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy --strict, pytest
# (unit tests + integration tests against a real llama.cpp server from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# Real clients and servers from npm for the integration tests (tests/integration/test_codex_cli.py).
CODEX_VERSION=0.169.0
if [ ! -x .cache/codex/node_modules/.bin/codex ] || \
   ! grep -q "\"version\": \"$CODEX_VERSION\"" .cache/codex/node_modules/@openai/codex/package.json; then
  mkdir -p .cache/codex
  npm install --prefix .cache/codex --no-audit --no-fund --loglevel=error "@openai/codex@$CODEX_VERSION" >/dev/null
fi
# A third-party MCP server (tests/integration/test_hosted_mcp.py).
EVERYTHING_VERSION=2026.8.31
if [ ! -x .cache/mcp-everything/node_modules/.bin/mcp-server-everything ] || ! grep -q "\"version\": \"$EVERYTHING_VERSION\"" \
    .cache/mcp-everything/node_modules/@modelcontextprotocol/server-everything/package.json; then
  mkdir -p .cache/mcp-everything
  npm install --prefix .cache/mcp-everything --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
