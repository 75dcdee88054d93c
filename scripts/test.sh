#!/usr/bin/env bash
# The project's one test command (README, CI): `bash scripts/test.sh [extra pytest args]`.
#
# Idempotent setup, then the whole suite: unit tests, kernel tests, the real-browser tests and
# every notebook under notebooks/ executed by nbval in a real kernel of this venv.
#   1. .venv (python3.11+) with `pip install -e '.[test]'` (skipped when pyproject is unchanged)
#   2. Debian chromium via apt-get when missing and running as root. The browser tests skip
#      with a clear message only when Chromium cannot be installed; once it is there they must
#      run (a skip would hide a broken front end)
#   3. `npm ci --prefix tests/peers` when tests/peers/package.json exists and npm is present
#   4. a throwaway PostgreSQL cluster (AGENTLOOP_TEST_DATABASE_URL), stopped at exit
#   5. pytest under `timeout`, so a stuck background task cannot hang CI
# The exit code is pytest's (124 when the overall timeout fired).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_setup.sh
source scripts/_setup.sh

ensure_venv
ensure_pip_install test pyproject.toml -- -e '.[test]'
if ensure_chromium; then
    # Chromium is there: from now on a browser test that cannot run is a failure, not a skip.
    export AGENTLOOP_REQUIRE_BROWSER=1
else
    _warn "Chromium could not be installed: the browser tests will skip (with this reason)."
fi
ensure_npm_peers
# A throwaway PostgreSQL cluster (stopped at exit) for the persistence contract suite.
ensure_postgres || true

_stage "pytest tests + notebooks (nbval-lax)"
set +e
timeout --kill-after=30 "${AGENTLOOP_TEST_TIMEOUT:-1500}" \
    "$VENV/bin/python" -m pytest tests --nbval-lax --nbval-current-env notebooks "$@"
status=$?
set -e
_stage_done
exit "$status"
