# shellcheck shell=bash
# What ./scripts/test.sh needs besides Python, and the Debian packages that bring it. Sourced by
# scripts/test.sh (tests/unit/docs/test_prerequisites.py runs it with a PATH that lacks a tool).
#
# check_prerequisites: prints each missing tool with its Debian package and what needs it; then
# installs the packages with apt-get where it may (OCM_INSTALL_PREREQS: "auto", the default, when
# running as root with apt-get present, as .ci/run does; "1" also through sudo; "0" never) and
# checks again. Returns 0 when everything is there, else 1 after saying exactly what to install.
# POSTGRES_ROOT (default /usr/lib/postgresql) is where Debian keeps PostgreSQL's server binaries.

# tool|Debian package|what needs it
PREREQUISITES=(
  "node|nodejs|the Codex CLI, Claude Code and the MCP test server from npm (Node 20 or newer)"
  "npm|npm|installs those three into .cache/"
  "bwrap|bubblewrap|the code interpreter's sandbox (tests/unit/sandbox)"
  "initdb|postgresql|the scale-out tests' PostgreSQL (tests/support/postgres.py)"
  "redis-server|redis-server|the scale-out tests' Redis (tests/support/redis_server.py)"
  "chromium|chromium|the console's browser test (tests/integration/test_console_browser.py)"
  "chromedriver|chromium-driver|the console's browser test (its WebDriver)"
  "docker-compose|docker-compose|compose.yaml validated with Compose v1 (tests/unit/test_deploy.py)"
)

prerequisite_present() {  # TOOL: found on PATH (initdb: also where Debian installs it)
  if [ "$1" = initdb ] && compgen -G "${POSTGRES_ROOT:-/usr/lib/postgresql}/*/bin/initdb" >/dev/null; then
    return 0
  fi
  command -v "$1" >/dev/null 2>&1
}

missing_packages() {  # prints the Debian packages of the missing tools, one per line
  local entry tool package
  for entry in "${PREREQUISITES[@]}"; do
    IFS='|' read -r tool package _ <<<"$entry"
    prerequisite_present "$tool" || echo "$package"
  done
}

_install_prerequisites() {  # PACKAGE...: apt-get install where allowed; 1 when not tried
  local policy="${OCM_INSTALL_PREREQS:-auto}" apt=()
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$policy" = 0 ]; then
    return 1
  elif [ "${EUID:-$(id -u)}" = 0 ]; then
    apt=(apt-get)
  elif [ "$policy" = 1 ] && command -v sudo >/dev/null 2>&1; then
    apt=(sudo apt-get)
  else
    return 1
  fi
  echo "test.sh: installing with apt-get: $*" >&2
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" update -qq >&2 || return 0
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "$@" >&2 || true
}

check_prerequisites() {
  local packages entry tool package why
  mapfile -t packages < <(missing_packages)
  [ ${#packages[@]} -eq 0 ] && return 0
  echo "test.sh: missing prerequisites:" >&2
  for entry in "${PREREQUISITES[@]}"; do
    IFS='|' read -r tool package why <<<"$entry"
    prerequisite_present "$tool" || echo "  $tool (Debian package $package): $why" >&2
  done
  if _install_prerequisites "${packages[@]}"; then
    mapfile -t packages < <(missing_packages)
    [ ${#packages[@]} -eq 0 ] && { echo "test.sh: prerequisites installed" >&2; return 0; }
    echo "test.sh: still missing after apt-get: ${packages[*]}" >&2
  fi
  echo "test.sh: install them, then run ./scripts/test.sh again:" >&2
  echo "  sudo apt-get install -y --no-install-recommends ${packages[*]}" >&2
  [ "${OCM_INSTALL_PREREQS:-auto}" = 0 ] ||
    echo "  (run as root, or with OCM_INSTALL_PREREQS=1 to use sudo, and test.sh installs them itself)" >&2
  return 1
}
