#!/usr/bin/env bash
# First contact, as a user meets it: the README's quickstart and the Dockerfile's install line,
# each in a brand-new venv outside the test venv (see scripts/smoke.py). Run by .ci/run after
# the suite; `./scripts/smoke.sh readme` or `docker` runs one phase.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/smoke.py "$@"
