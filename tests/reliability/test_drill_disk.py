"""Known-fault drill: the disk fills up or turns read-only in the middle of a session. The turn
that finds out ends ``error`` with code ``PERSISTENCE`` and a message naming the file, the OS
error and the way out; later turns are refused at once; every event acknowledged before the
fault is on disk, and the file stays loadable (no half-written line)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from _drills import bounded, stored_prefix_matches, turn_ends
from _faults import failing_disk
from _loop_helpers import make_app, new_agent, run

from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("code", "says"),
    [(errno.ENOSPC, "No space left on device"), (errno.EROFS, "Read-only file system")],
    ids=["full", "read-only"],
)
async def test_a_disk_failing_mid_session_ends_the_turn_error_and_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, says: str
) -> None:
    async with bounded(seconds=20):
        app = make_app(persistence=JsonlPersistence(tmp_path))
        agent, model = new_agent(app, text("one"), text("two"), text("never"))
        await run(agent, "first")
        acknowledged = agent.session.durable_seq
        assert acknowledged == len(agent.session.events) - 1
        path = tmp_path / f"{agent.session.id}.jsonl"
        failing_disk(monkeypatch, path, code)
        await run(agent, "second")
        first, second = turn_ends(agent)
        assert first["kind"] == "completed"
        assert (second["kind"], second["code"]) == ("error", "PERSISTENCE")
        assert says in second["message"] and str(path.resolve()) in second["message"]
        assert "dispose the agent and resume the session" in second["message"]
        await run(agent, "third")  # refused at once: no model call
        assert turn_ends(agent)[-1]["code"] == "PERSISTENCE" and len(model.requests) == 2
        monkeypatch.undo()
        await app.aclose()  # disposal completes although the session cannot be written
        _, stored = JsonlPersistence(tmp_path).load(agent.session.id)
        assert len(stored) == acknowledged + 1  # exactly what was acknowledged, whole lines
        assert agent.session.durable_seq == acknowledged
        stored_prefix_matches(agent, stored)
