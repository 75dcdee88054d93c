"""Start the aimock server (npm ``@copilotkit/aimock``) on 127.0.0.1 for one test module.

``npm ci --prefix tests/peers`` installs it under ``tests/peers/node_modules``. The fixture
skips, with the reason, when node or the package is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

PEERS = Path(__file__).parent
CLI = PEERS / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
FIXTURES = PEERS / "aimock-fixtures"
_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
_START_TIMEOUT = 20.0


def _start(fixtures: Path) -> tuple[subprocess.Popen[str], threading.Thread, str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("aimock needs Node.js: `node` is not on PATH")
    if not CLI.exists():
        pytest.skip(f"aimock is not installed ({CLI} missing): run `npm ci --prefix tests/peers`")
    proc = subprocess.Popen(
        [node, str(CLI), "-p", "0", "-h", "127.0.0.1", "-f", str(fixtures), "--strict"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    found: list[str] = []
    seen: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        # Keep draining the pipe for the server's lifetime, so it never blocks on a full pipe.
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            match = _LISTENING.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    pumper = threading.Thread(target=pump, name="aimock-output", daemon=True)
    pumper.start()
    if not ready.wait(_START_TIMEOUT) or not found:
        _stop(proc, pumper)
        raise RuntimeError(f"aimock did not start: {''.join(seen)[-2000:]}")
    return proc, pumper, found[0]


def _stop(proc: subprocess.Popen[str], pumper: threading.Thread) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    pumper.join(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def aimock_url() -> Iterator[str]:
    """Root URL of an aimock server serving ``tests/peers/aimock-fixtures`` in strict mode
    (OpenAI route ``/v1/chat/completions``, Anthropic route ``/v1/messages``)."""
    proc, pumper, url = _start(FIXTURES)
    try:
        yield url
    finally:
        _stop(proc, pumper)
