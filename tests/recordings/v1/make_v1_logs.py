"""Records ``tests/recordings/v1/``: session logs in the version-1 form (one ``assistant/chunk``
event per streamed chunk), written by agentloop_nb before the log coalesced its chunks, and
what that code derived from them (the model messages after crash repair, the view state).

Kept to show how the fixtures were made; it only reproduces them with a version-1 writer
(run from a checkout before the version-2 log: ``PYTHONPATH=. python
tests/recordings/v1/make_v1_logs.py``). ``tests/test_session_log_versions.py`` loads them
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
    # the cut stream's last chunk: the version-1 log holds every chunk as streamed
    return bool(chunk.get("index") == 1)


if __name__ == "__main__":
    make(HERE, "v1", _logged_cut)
