"""A failing disk is never silent: a deleted file, a full disk, a file-size limit or an unusable
root make ``session/flush`` raise a ``PersistenceError`` (code ``PERSISTENCE``) naming the file,
the OS error and the fix, at every later flush; committed bytes are never rewritten and no
half-written line is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _faults import failing_disk
from _loop_helpers import OPTIONS, make_app

from agentloop_nb.context import Context
from agentloop_nb.session import JsonlPersistence, PersistenceError, SessionStore

pytestmark = pytest.mark.anyio


def attached_store(root: Path) -> tuple[SessionStore, JsonlPersistence]:
    ctx = Context()
    backend = JsonlPersistence(root)
    backend.install(ctx)
    return SessionStore(ctx), backend


async def flush_error(session: Any) -> PersistenceError:
    with pytest.raises(ExceptionGroup) as info:
        await session.flush()
    error = info.value.exceptions[0]
    assert isinstance(error, PersistenceError) and error.code == "PERSISTENCE"
    return error


async def test_a_deleted_session_file_fails_every_later_flush_and_is_not_recreated(
    tmp_path: Path,
) -> None:
    store, backend = attached_store(tmp_path)
    session = store.create("s")
    session.append("note", {"n": 1})
    await session.flush()
    path = tmp_path / "s.jsonl"
    path.unlink()
    session.append("note", {"n": 2})
    for _ in range(2):
        error = await flush_error(session)
        assert str(path.resolve()) in str(error) and "deleted or moved" in str(error)
        assert "up to seq 0" in str(error)
    assert not path.exists()
    await backend.aclose()


async def test_a_full_disk_mid_write_leaves_no_half_line_and_keeps_the_committed_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, backend = attached_store(tmp_path)
    session = store.create("s")
    session.append("note", {"n": 1})
    await session.flush()
    path = tmp_path / "s.jsonl"
    committed = path.read_bytes()
    undo = failing_disk(monkeypatch, path)  # a short write, then full
    session.append("note", {"text": "x" * 1000})
    error = await flush_error(session)
    assert "No space left on device" in str(error) and "free some space" in str(error)
    assert path.read_bytes() == committed
    undo()
    session.append("note", {"n": 3})
    await flush_error(session)  # still failing: nothing more is written until resolved
    assert path.read_bytes() == committed
    await backend.aclose()


FSIZE = """
import asyncio, resource, signal, sys
from agentloop_nb.context import Context
from agentloop_nb.session import JsonlPersistence, SessionStore

async def main():
    ctx = Context()
    backend = JsonlPersistence(sys.argv[1])
    backend.install(ctx)
    session = SessionStore(ctx).create("s")
    session.append("note", {"n": 1})
    await session.flush()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
    size = (backend.path("s")).stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
    session.append("note", {"text": "x" * 5000})
    try:
        await session.flush()
    except ExceptionGroup as group:
        print(type(group.exceptions[0]).__name__, group.exceptions[0])
    await backend.aclose()

asyncio.run(main())
"""


def test_a_file_size_limit_is_reported_and_the_log_stays_loadable(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", FSIZE, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith("PersistenceError") and "size limit" in done.stdout
    _, events = JsonlPersistence(tmp_path).load("s")
    assert [e.data for e in events] == [{"n": 1}]
    assert (tmp_path / "s.jsonl").read_bytes().endswith(b"\n")


async def test_an_unusable_root_refuses_the_agent_at_creation_naming_the_path(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    app = make_app(persistence_root=blocker / "sessions")
    with pytest.raises(PersistenceError, match="not-a-directory") as info:
        await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)
    assert info.value.code == "PERSISTENCE" and "cannot lock session 's'" in str(info.value)
    assert app.ctx.agents.list() == []
    await app.aclose()


async def test_a_backend_whose_root_changes_writes_under_the_new_root_only(
    tmp_path: Path,
) -> None:
    """The writer remembers each session's file name, for the root it was made under: a new
    ``root`` is where the next write looks (here it finds no file, and says so), and the file
    under the old root is left as it was."""
    store, backend = attached_store(tmp_path / "a")
    session = store.create("s")
    session.append("note", {"n": 1})
    await session.flush()
    old = tmp_path / "a" / "s.jsonl"
    committed = old.read_bytes()
    backend.root = tmp_path / "b"
    session.append("note", {"n": 2})
    error = await flush_error(session)
    assert str((tmp_path / "b" / "s.jsonl").resolve()) in str(error)
    assert old.read_bytes() == committed
    await backend.aclose()
