"""One writer per session: a second App or process that creates or resumes an attached session
gets ``SessionLockedError`` naming the holder; disposal, ``aclose`` and the death of the holder
release it; a writer never appends to a file someone else changed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _loop_helpers import OPTIONS, make_app, run, scripted

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.session import (
    JsonlPersistence,
    PersistenceError,
    SessionLockedError,
    SessionStore,
)
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio

HOLDER = """
import sys
from agentloop_nb.session import JsonlPersistence
lease = JsonlPersistence(sys.argv[1]).acquire(sys.argv[2])
print("locked", flush=True)
sys.stdin.read()  # hold the lock until killed or stdin closes
"""


def app_at(root: Path) -> App:
    app = make_app(persistence=JsonlPersistence(root))
    scripted(app, *[text(f"answer {i}") for i in range(4)])
    return app


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that has session ``s1`` (under ``tmp_path``) attached."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), "s1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"  # synchronises on the lock being held
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def lock_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("*.lock"))


async def first_run(root: Path) -> None:
    app = app_at(root)
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await app.aclose()


async def test_a_second_app_resuming_an_attached_session_is_refused_and_publishes_nothing(
    tmp_path: Path,
) -> None:
    first = app_at(tmp_path)
    handle = await first.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    second = app_at(tmp_path)
    with pytest.raises(SessionLockedError) as info:
        await second.ctx.agents.resume(resume_session_id="s1")
    message = str(info.value)
    assert f"pid {os.getpid()}" in message and socket.gethostname() in message
    assert "dispose the other agent" in message
    assert isinstance(info.value, RuntimeError)
    assert second.ctx.agents.list() == [] and second.ctx.sessions.get("s1") is None
    await handle.dispose()
    resumed = await second.ctx.agents.resume(resume_session_id="s1")
    await run(resumed.agent, "second")
    await first.aclose()
    await second.aclose()
    _, events = JsonlPersistence(tmp_path).load("s1")
    assert [e.seq for e in events] == list(range(len(events)))
    assert [e.type for e in events].count("turn/start") == 2


async def test_creating_an_id_another_app_has_attached_is_refused_as_locked(
    tmp_path: Path,
) -> None:
    first = app_at(tmp_path)
    await first.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    second = app_at(tmp_path)
    with pytest.raises(SessionLockedError, match="'s1' is attached to another writer"):
        await second.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    assert second.ctx.agents.list() == []
    await first.aclose()
    await second.aclose()


async def test_closing_an_app_releases_its_sessions_for_the_next_app(tmp_path: Path) -> None:
    await first_run(tmp_path)
    app = app_at(tmp_path)
    handle = await app.ctx.agents.resume(resume_session_id="s1")
    assert lock_files(tmp_path) == ["s1.jsonl.lock"]
    await run(handle.agent, "again")
    await app.aclose()
    assert lock_files(tmp_path) == []  # a released lock leaves no file behind


async def test_a_session_held_by_another_process_names_its_pid(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    app = app_at(tmp_path)
    with pytest.raises(SessionLockedError, match=f"pid {holder.pid} on host"):
        await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    assert app.ctx.agents.list() == []
    await app.aclose()


async def test_a_holder_killed_with_sigkill_never_bricks_the_session(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    os.kill(holder.pid, signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    await first_run(tmp_path)
    app = app_at(tmp_path)
    handle = await app.ctx.agents.resume(resume_session_id="s1")
    await run(handle.agent, "after the crash")
    await app.aclose()


def attached_store(root: Path) -> tuple[SessionStore, JsonlPersistence]:
    """A session store whose sessions ``JsonlPersistence(root)`` writes (no App, no loop)."""
    ctx = Context()
    backend = JsonlPersistence(root)
    backend.install(ctx)
    return SessionStore(ctx), backend


async def test_a_write_after_another_program_appended_fails_every_later_flush(
    tmp_path: Path,
) -> None:
    store, backend = attached_store(tmp_path)
    session = store.create("s1")
    session.append("note", {"text": "committed"})
    await session.flush()
    path = tmp_path / "s1.jsonl"
    with path.open("ab") as f:  # a second writer that ignores the lock
        f.write(b'{"type":"intruder","seq":2,"time":0,"data":{}}\n')
    before = path.read_bytes()
    session.append("note", {"text": "mine"})
    for _ in range(2):
        with pytest.raises(ExceptionGroup) as info:
            await session.flush()
        error = info.value.exceptions[0]
        assert isinstance(error, PersistenceError) and error.code == "PERSISTENCE"
        assert str(path.resolve()) in str(error)
        assert "not what this writer last wrote" in str(error)
    assert path.read_bytes() == before
    await backend.aclose()


async def test_a_replaced_file_is_not_written_to(tmp_path: Path) -> None:
    store, backend = attached_store(tmp_path)
    session = store.create("s1")
    await session.flush()
    path = tmp_path / "s1.jsonl"
    copy = path.read_bytes()
    path.unlink()
    path.write_bytes(copy)  # same bytes, another file (a restore from a backup, say)
    session.append("note", {"text": "mine"})
    with pytest.raises(ExceptionGroup, match="session/flush") as info:
        await session.flush()
    assert "replaced" in str(info.value.exceptions[0])
    assert path.read_bytes() == copy
    await backend.aclose()


async def test_a_lease_taken_before_loading_is_adopted_by_the_resumed_session(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path)
    store, backend = attached_store(tmp_path)
    lease = backend.acquire("s1")
    with pytest.raises(SessionLockedError):
        JsonlPersistence(tmp_path).acquire("s1")
    header, events = backend.load("s1")
    session = store.enter(store.prepare(header=header, events=events))
    lease.release()  # a no-op now: the attached session holds the lock
    with pytest.raises(SessionLockedError):
        JsonlPersistence(tmp_path).acquire("s1")
    session.append("note", {"text": "resumed"})
    await session.flush()
    store.detach(session)
    await backend.aclose()
    JsonlPersistence(tmp_path).acquire("s1").release()


async def test_releasing_an_unused_lease_frees_the_session(tmp_path: Path) -> None:
    await first_run(tmp_path)
    lease = JsonlPersistence(tmp_path).acquire("s1")
    other = JsonlPersistence(tmp_path)
    with pytest.raises(SessionLockedError):
        other.acquire("s1")
    lease.release()
    lease.release()  # idempotent
    other.acquire("s1").release()
    assert lock_files(tmp_path) == []


async def test_a_resume_loaded_before_another_writer_appended_is_refused(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path)
    store, backend = attached_store(tmp_path)
    header, events = backend.load("s1")  # no lease taken: the file may still change
    writer_store, writer = attached_store(tmp_path)
    sneaky = writer_store.enter(writer_store.prepare(header=header, events=events))
    sneaky.append("note", {"text": "from elsewhere"})
    await sneaky.flush()
    writer_store.detach(sneaky)
    await writer.aclose()
    with pytest.raises(PersistenceError, match="changed after it was loaded"):
        store.enter(store.prepare(header=header, events=events))
    assert store.get("s1") is None
    JsonlPersistence(tmp_path).acquire("s1").release()  # the refused resume let the lock go
    await backend.aclose()


FORKING_HOLDER = """
import os, sys
from agentloop_nb.session import JsonlPersistence
lease = JsonlPersistence(sys.argv[1]).acquire(sys.argv[2])
child = os.fork()
if child == 0:
    # os.fork's at-fork hooks have run by now: announce from the child itself, so the test never
    # races a child that has not been scheduled yet
    print(os.getpid(), flush=True)
    sys.stdin.read()  # a long-lived child (a worker pool, say) that inherited the lock
    os._exit(0)
sys.stdin.read()
"""


def test_a_forked_child_does_not_keep_a_killed_holders_lock(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKING_HOLDER, str(tmp_path), "s1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    child = int(proc.stdout.readline())
    try:
        with pytest.raises(SessionLockedError):
            JsonlPersistence(tmp_path).acquire("s1")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        JsonlPersistence(tmp_path).acquire("s1").release()  # the live child holds nothing
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()  # the child reads EOF and exits
        proc.stdout.close()
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            os.kill(child, signal.SIGKILL)
