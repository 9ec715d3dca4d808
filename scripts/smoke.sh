#!/usr/bin/env bash
# First contact, as a user meets it: the README's quickstart, the Getting-started page
# (docs/getting-started.md: its commands and its Python example with only what it says to
# install) and the Dockerfile's install line, each in a brand-new venv outside the test venv
# (see scripts/smoke.py). Run by .ci/run after the suite; `./scripts/smoke.sh readme`, `site`
# or `docker` runs one phase.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/smoke.py "$@"
