"""A session that can no longer be written stops its agent loudly: the turn that meets the
failure ends ``error`` with code ``PERSISTENCE`` and reports it once on ``agent/error``; every
later turn is refused without calling the model; disposal still completes and gives the
session's writer lock back. A resume holds the lock from before loading until it publishes, and
gives it back when it fails."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import OPTIONS, data, make_app, run, scripted

from agentloop_nb.app import App
from agentloop_nb.hooks import ErrorPayload
from agentloop_nb.session import (
    JsonlPersistence,
    PersistenceError,
    SessionCorruptError,
    SessionLockedError,
)
from agentloop_nb.testing import ScriptedModel, text

pytestmark = pytest.mark.anyio


def app_at(root: Path) -> tuple[App, ScriptedModel]:
    app = make_app(persistence=JsonlPersistence(root))
    return app, scripted(app, *[text(f"answer {i}") for i in range(6)])


def error_payloads(app: App) -> list[ErrorPayload]:
    seen: list[ErrorPayload] = []
    app.ctx.on("agent/error", seen.append)
    return seen


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """Paths added to the yielded set fail every write with ENOSPC."""
    failing: set[str] = set()
    real_write = os.write

    def write(fd: int, blob: Any) -> int:
        for path in failing:
            if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, blob)

    monkeypatch.setattr(os, "write", write)
    yield failing


async def test_a_deleted_session_file_ends_the_turn_persistence_and_refuses_later_turns(
    tmp_path: Path,
) -> None:
    app, model = app_at(tmp_path)
    errors = error_payloads(app)
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    agent = handle.agent
    await run(agent, "one")
    (tmp_path / "s1.jsonl").unlink()
    await run(agent, "two")
    reasons = [d["reason"] for d in data(agent, "turn/end")]
    assert [r["kind"] for r in reasons] == ["completed", "error"]
    assert reasons[1]["code"] == "PERSISTENCE"
    assert "dispose the agent and resume the session" in reasons[1]["message"]
    assert len(errors) == 1 and isinstance(errors[0].error, PersistenceError)
    assert errors[0].turn == 2
    calls = len(model.requests)
    await run(agent, "three")
    assert len(model.requests) == calls  # refused: no model call
    third = data(agent, "turn/end")[-1]["reason"]
    assert third["kind"] == "error" and third["code"] == "PERSISTENCE"
    assert "three" in [m.content[0].text for m in agent.inbox.next_turn]  # kept, not claimed
    assert len(errors) == 2 and errors[1].turn == 3  # every error end is reported, once
    assert not (tmp_path / "s1.jsonl").exists()  # never recreated
    await app.aclose()


async def test_disposing_an_agent_whose_writes_fail_releases_the_session_for_a_resume(
    tmp_path: Path, full_disk: set[str]
) -> None:
    app, _ = app_at(tmp_path)
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "one")
    full_disk.add(str(tmp_path / "s1.jsonl"))
    await run(handle.agent, "two")
    assert data(handle.agent, "turn/end")[-1]["reason"]["code"] == "PERSISTENCE"
    await handle.dispose()  # completes although the final flush fails too
    assert app.ctx.agents.list() == []
    full_disk.clear()  # the cause is fixed: the committed log resumes in another App
    other, _ = app_at(tmp_path)
    resumed = await other.ctx.agents.resume(resume_session_id="s1")
    await run(resumed.agent, "again")
    assert data(resumed.agent, "turn/end")[-1]["reason"]["kind"] == "completed"
    await other.aclose()
    await app.aclose()


async def test_a_resume_holds_the_lock_during_setup_and_gives_it_back_when_setup_fails(
    tmp_path: Path,
) -> None:
    first, _ = app_at(tmp_path)
    handle = await first.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "one")
    await first.aclose()
    app, _ = app_at(tmp_path)
    seen: list[str] = []

    def setup(ctx: Any) -> None:
        with pytest.raises(SessionLockedError):
            JsonlPersistence(tmp_path).acquire("s1")  # reserved before the log was loaded
        seen.append("locked")
        raise RuntimeError("setup failed")

    with pytest.raises(RuntimeError, match="setup failed"):
        await app.ctx.agents.resume(resume_session_id="s1", setup=setup)
    assert seen == ["locked"]
    JsonlPersistence(tmp_path).acquire("s1").release()  # given back
    await app.aclose()


async def test_a_resume_of_a_corrupt_log_gives_the_lock_back(tmp_path: Path) -> None:
    first, _ = app_at(tmp_path)
    handle = await first.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "one")
    await first.aclose()
    path = tmp_path / "s1.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"garbage\n" + b"".join(lines[1:]))
    app, _ = app_at(tmp_path)
    with pytest.raises(SessionCorruptError):
        await app.ctx.agents.resume(resume_session_id="s1")
    JsonlPersistence(tmp_path).acquire("s1").release()
    await app.aclose()
