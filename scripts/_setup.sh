# shellcheck shell=bash
# Shared, idempotent setup steps for scripts/test.sh and scripts/quickstart.sh.
#
# Source this file from the repository root (`cd "$(dirname "$0")/.."` first). Every step is
# safe to re-run: it checks what is already there and does only the missing work, so a second
# `bash scripts/test.sh` goes straight to the tests. Each function prints one "==>" line per
# stage with its duration, so a slow CI run shows where the time went.

set -euo pipefail

VENV="${AGENTLOOP_VENV:-.venv}"
CHROMIUM="${AGENTLOOP_CHROMIUM:-/usr/bin/chromium}"

_stage_start=0

_stage() {
    _stage_start=$SECONDS
    printf '==> %s\n' "$*"
}

_stage_done() {
    printf '    done in %ss\n' "$((SECONDS - _stage_start))"
}

# Clean-up steps run when the script exits, in registration order (one EXIT trap for all, so
# a later step never replaces an earlier one's trap).
_EXIT_HOOKS=()
_run_exit_hooks() {
    local hook
    for hook in "${_EXIT_HOOKS[@]}"; do
        "$hook" || true
    done
}
on_exit() {
    _EXIT_HOOKS+=("$1")
    trap _run_exit_hooks EXIT
}

_warn() {
    printf '!!! %s\n' "$*" >&2
}

# A python3.11+ interpreter to build the venv from: newest first, then plain python3.
_find_python() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# Create $VENV unless a working one is already there.
ensure_venv() {
    if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        return 0
    fi
    local python
    if ! python="$(_find_python)"; then
        _warn "Python 3.11 or newer is required: install python3.11 (apt-get install python3 on Debian 12) and re-run."
        return 1
    fi
    _stage "creating $VENV with $python ($("$python" --version 2>&1))"
    # --clear: a venv whose interpreter no longer runs (moved, upgraded) is rebuilt from scratch.
    "$python" -m venv --clear "$VENV"
    _stage_done
}

# Install pip requirements into $VENV unless the same inputs were installed before.
#   ensure_pip_install STAMP_NAME INPUT_FILE... -- PIP_ARGS...
# The stamp is a hash of the input files' contents plus the pip arguments; it lives inside the
# venv so deleting the venv forgets it.
ensure_pip_install() {
    local name="$1"
    shift
    local inputs=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do
        inputs+=("$1")
        shift
    done
    shift # the "--"
    local stamp_file="$VENV/.agentloop-$name.stamp"
    local want
    want="$( (cat "${inputs[@]}"; printf '%s\n' "$@") | sha256sum | cut -d' ' -f1)"
    if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$want" ]]; then
        return 0
    fi
    _stage "pip install $* (into $VENV)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q "$@"
    printf '%s\n' "$want" >"$stamp_file"
    _stage_done
}

# The files the JupyterLab extension's build reads (hatch_build.py and labextension/ without
# its build outputs), one per line: an install stamp that lists them rebuilds on any change.
labextension_inputs() {
    printf '%s\n' hatch_build.py
    [[ -d labextension ]] || return 0
    find labextension \( -name node_modules -o -name lib -o -name .core \) -prune -o \
        -type f ! -name .build.stamp ! -name tsconfig.tsbuildinfo -print | LC_ALL=C sort
}

# `pip install -e '.[test]'` into $VENV (scripts/test.sh, scripts/realmodel.sh: one stamp for
# both), re-run when pyproject.toml or the extension's sources changed.
ensure_test_install() {
    local inputs
    mapfile -t inputs < <(labextension_inputs)
    ensure_pip_install test pyproject.toml "${inputs[@]}" -- -e '.[test]'
}

# Debian's chromium for the browser tests. Returns 0 when it is there afterwards; otherwise
# prints why and returns 1 (callers decide whether that is fatal).
ensure_chromium() {
    if [[ -x "$CHROMIUM" ]]; then
        return 0
    fi
    if [[ "$(id -u)" != 0 ]]; then
        _warn "Chromium is not installed and this is not root: run 'sudo apt-get install -y chromium' (browser tests will skip)."
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        _warn "Chromium is not installed and apt-get is missing: install chromium at $CHROMIUM (browser tests will skip)."
        return 1
    fi
    _stage "apt-get install chromium"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; then
        _warn "apt-get install chromium failed (browser tests will skip)."
        return 1
    fi
    _stage_done
    [[ -x "$CHROMIUM" ]]
}

# The npm test peers (tests/peers/package.json), when that folder exists and node is present.
# `npm ci` wipes node_modules, so it runs only when the lock file changed since the last install.
ensure_npm_peers() {
    local dir=tests/peers
    [[ -f "$dir/package.json" ]] || return 0
    if ! command -v npm >/dev/null 2>&1; then
        _warn "npm is missing: tests that need the npm peers in $dir will skip."
        return 0
    fi
    local lock="$dir/package-lock.json"
    local stamp="$dir/node_modules/.agentloop-peers.stamp"
    local want
    want="$(cat "$dir/package.json" "$lock" 2>/dev/null | sha256sum | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    if [[ -f "$lock" ]]; then
        _stage "npm ci --prefix $dir"
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    else
        _stage "npm install --prefix $dir (no package-lock.json: commit one for reproducible installs)"
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error
    fi
    printf '%s\n' "$want" >"$stamp"
    _stage_done
}

# Flags JupyterLab needs on these machines: root refuses to start without --allow-root.
lab_root_flags() {
    if [[ "$(id -u)" == 0 ]]; then
        printf '%s\n' --allow-root
    fi
}

# The newest Debian PostgreSQL server binaries (/usr/lib/postgresql/N/bin), or nothing.
_pg_bindir() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]] && printf '%s\n' "$dir"
}

_PG_DIR=""
_PG_RUNAS=()

_stop_postgres() {
    if [[ -n "$_PG_DIR" && -d "$_PG_DIR" ]]; then
        "${_PG_RUNAS[@]}" "$(_pg_bindir)/pg_ctl" -D "$_PG_DIR/data" -m immediate -w stop \
            >/dev/null 2>&1 || true
        rm -rf "$_PG_DIR"
        _PG_DIR=""
    fi
}

# A throwaway PostgreSQL cluster for the persistence contract tests: Debian's postgresql via
# apt-get when missing (as root), initdb into a temp dir, started on a free loopback port as a
# non-root user (the server refuses to run as root), stopped and deleted at exit (an `on_exit` hook).
# Exports AGENTLOOP_TEST_DATABASE_URL. Returns 1 with a warning when it cannot be had: the
# Postgres tests then skip with that reason. An AGENTLOOP_TEST_DATABASE_URL already set is kept.
ensure_postgres() {
    if [[ -n "${AGENTLOOP_TEST_DATABASE_URL:-}" ]]; then
        return 0
    fi
    if [[ -z "$(_pg_bindir)" ]]; then
        if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
            _warn "PostgreSQL is not installed and cannot be (not root, or no apt-get): the Postgres tests will skip."
            return 1
        fi
        _stage "apt-get install postgresql"
        if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }; then
            _warn "apt-get install postgresql failed: the Postgres tests will skip."
            return 1
        fi
        _stage_done
    fi
    local bindir port
    bindir="$(_pg_bindir)"
    _stage "starting a throwaway PostgreSQL cluster ($bindir)"
    _PG_DIR="$(mktemp -d -t agentloop-pg.XXXXXX)"
    _PG_RUNAS=()
    if [[ "$(id -u)" == 0 ]]; then
        id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
        chown postgres "$_PG_DIR"
        _PG_RUNAS=(runuser -u postgres --)
    fi
    on_exit _stop_postgres
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    if ! "${_PG_RUNAS[@]}" "$bindir/initdb" -D "$_PG_DIR/data" -U agentloop -A trust \
        --no-sync -E UTF8 >"$_PG_DIR/initdb.log" 2>&1 ||
        ! "${_PG_RUNAS[@]}" "$bindir/pg_ctl" -D "$_PG_DIR/data" -l "$_PG_DIR/server.log" -w \
            -o "-h 127.0.0.1 -p $port -k $_PG_DIR -F" start >/dev/null; then
        _warn "the PostgreSQL cluster did not start (see below): the Postgres tests will skip."
        cat "$_PG_DIR"/*.log >&2 2>/dev/null || true
        _stop_postgres
        return 1
    fi
    export AGENTLOOP_TEST_DATABASE_URL="postgresql://agentloop@127.0.0.1:$port/postgres"
    _stage_done
}
