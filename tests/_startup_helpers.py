"""Helpers of the start-up tests: a fresh interpreter's answer, and which modules it loaded."""

from __future__ import annotations

import json
import subprocess
import sys


def run_fresh(code: str) -> object:
    """Run ``code`` in a fresh interpreter; its last printed line, decoded as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded_among(names: tuple[str, ...], modules: set[str]) -> list[str]:
    """The ``modules`` that are one of ``names`` or inside one, sorted."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))
