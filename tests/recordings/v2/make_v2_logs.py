"""Records ``tests/recordings/v2/``: session logs in the version-2 form (chunks coalesced, a
response's ``usage`` and ``finish`` chunks logged as streamed), written by agentloop_nb before
the log left out the chunks a message implies, and what that code derived from them (the model
messages after crash repair, the view state).

Kept to show how the fixtures were made; it only reproduces them with a version-2 writer
(run from a checkout before the version-3 log: ``PYTHONPATH=. python
tests/recordings/v2/make_v2_logs.py``). ``tests/test_session_log_versions.py`` loads them
(``tests/_log_state.py`` derives the state); the script is ``tests/recordings/make_logs.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))  # the shared script

from make_logs import make  # noqa: E402


def _logged_cut(chunk: Any) -> bool:
    # the cut stream's text: the version-2 log holds its open tool-call block until the
    # response closes, at the cancel
    return bool(chunk["type"] == "text-delta")


if __name__ == "__main__":
    make(HERE, "v2", _logged_cut)
