"""The persistence contract, run against every backend (JSONL and PostgreSQL): create, write-
behind appends behind a flush barrier, load, list from headers, crash repair on resume and one
writer per session. Each test gets a fresh store; ``other()`` opens a second backend on the
same store, as another App, kernel or machine would.

The PostgreSQL runs need ``AGENTLOOP_TEST_DATABASE_URL`` (``scripts/test.sh`` starts a
throwaway cluster and sets it); without it they skip, saying so.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, WAIT, data, make_app, reasons, register, run, scripted, types
from pydantic import ValidationError

from agentloop_nb.app import App
from agentloop_nb.session import (
    JsonlPersistence,
    PersistenceError,
    PostgresPersistence,
    SessionCorruptError,
    SessionEvent,
    SessionHeader,
    SessionLockedError,
    SessionNotFoundError,
    list_sessions,
)
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio

DB_URL = os.environ.get("AGENTLOOP_TEST_DATABASE_URL")

HOLDER = """
import sys
from agentloop_nb.session import JsonlPersistence, PostgresPersistence
kind, where, schema = sys.argv[1:4]
backend = JsonlPersistence(where) if kind == "jsonl" else PostgresPersistence(where, schema=schema)
lease = backend.acquire("s1")
print("locked", flush=True)
sys.stdin.read()  # hold the lock until stdin closes or the process is killed
"""


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


class Store:
    """One backend kind on one fresh store; ``open()`` makes a new backend instance on it."""

    def __init__(self, kind: str, where: str, schema: str) -> None:
        self.kind, self.where, self.schema = kind, where, schema

    def open(self) -> Any:
        if self.kind == "jsonl":
            return JsonlPersistence(self.where)
        return PostgresPersistence(self.where, schema=self.schema)

    def app(self, *script: Any) -> App:
        app = make_app(persistence=self.open())
        register(app, echo)
        scripted(app, *script)
        return app

    def raw(self, sql: str, *params: Any) -> None:
        """Run ``sql`` (``{}`` is the schema) on the PostgreSQL store, around the backend."""
        import psycopg
        from psycopg import sql as q

        assert self.where is not None
        with psycopg.connect(self.where, autocommit=True) as conn:
            conn.execute(q.SQL(sql).format(q.Identifier(self.schema)), params)

    def spoil_header(self, id: str) -> None:
        """Store a session ``id`` whose header record is not a header (other sessions exist)."""
        if self.kind == "jsonl":
            (Path(self.where) / f"{id}.jsonl").write_bytes(b"this is no header\n")
            return
        self.raw(
            "INSERT INTO {}.agentloop_sessions (id, created_at, header) VALUES (%s, 0, %s)",
            id,
            "this is no header",
        )

    def spoil_events(self, id: str) -> None:
        """Store a garbage record after session ``id``'s last event (loading it fails)."""
        if self.kind == "jsonl":
            with (Path(self.where) / f"{id}.jsonl").open("ab") as f:
                f.write(b'garbage, not an event\n{"type": "x"}\n')
            return
        self.raw(
            "INSERT INTO {}.agentloop_events (session_id, seq, event) VALUES (%s, 99, %s)",
            id,
            "garbage, not an event",
        )


def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(params=["jsonl", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "jsonl":
        yield Store("jsonl", str(tmp_path), "")
        return
    if DB_URL is None:
        pytest.skip(
            "no PostgreSQL: AGENTLOOP_TEST_DATABASE_URL is unset (scripts/test.sh starts a "
            "throwaway cluster when PostgreSQL can be installed)"
        )
    import psycopg  # noqa: F401  (a database without the driver is a failure, not a skip)

    schema = f"contract_{uuid.uuid4().hex[:12]}"
    yield Store("postgres", DB_URL, schema)
    _drop_schema(DB_URL, schema)


async def close(backend: Any) -> None:
    await backend.aclose()


async def test_create_then_load_gives_the_header_and_no_events(store: Store) -> None:
    backend = store.open()
    backend.create(SessionHeader("s1", created_at=1.5, cwd="/w"))
    header, events = store.open().load("s1")
    assert (header.id, header.created_at, header.cwd, events) == ("s1", 1.5, "/w", [])
    await close(backend)


async def test_create_of_a_stored_id_is_refused_and_keeps_the_stored_header(store: Store) -> None:
    backend = store.open()
    backend.create(SessionHeader("s1", created_at=1.0))
    with pytest.raises(FileExistsError, match="s1"):
        store.open().create(SessionHeader("s1", created_at=2.0))
    assert backend.load("s1")[0].created_at == 1.0
    await close(backend)


async def test_load_of_an_unknown_session_raises_not_found_naming_it(store: Store) -> None:
    with pytest.raises(SessionNotFoundError, match="nope") as info:
        store.open().load("nope")
    assert info.value.id == "nope"


async def test_list_gives_every_header_oldest_first(store: Store) -> None:
    backend = store.open()
    assert backend.list() == []
    backend.create(SessionHeader("late", created_at=20.0))
    backend.create(SessionHeader("early", created_at=10.0))
    assert [h.id for h in store.open().list()] == ["early", "late"]
    await close(backend)


async def test_listing_reads_headers_only_never_the_events(store: Store) -> None:
    backend = store.open()
    backend.create(SessionHeader("s1", created_at=1.0))
    backend.append("s1", [SessionEvent("turn/start", 1, 2.0, {"turn": 1})])
    backend.create(SessionHeader("s2", created_at=2.0))
    store.spoil_events("s1")
    with pytest.raises(SessionCorruptError):
        store.open().load("s1")  # its events cannot be parsed ...
    listing = store.open().scan()  # ... and listing never tries
    assert [(e.id, e.readable, e.problem) for e in listing] == [
        ("s1", True, None),
        ("s2", True, None),
    ]
    assert [h.id for h in store.open().list()] == ["s1", "s2"]
    await close(backend)


async def test_an_unreadable_header_is_listed_with_its_reason_and_hides_no_other(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    backend = store.open()
    backend.create(SessionHeader("late", created_at=20.0))
    backend.create(SessionHeader("early", created_at=10.0))
    store.spoil_header("broken")
    listing = list_sessions(store.open())
    assert [(e.id, e.readable) for e in listing] == [
        ("early", True),
        ("late", True),
        ("broken", False),
    ]
    broken = listing[-1]
    assert broken.header is None and broken.problem is not None
    assert "bad header" in broken.problem and "broken" in broken.where
    # ``list()`` keeps returning headers: the unreadable one is logged, naming it and why
    assert [h.id for h in store.open().list()] == ["early", "late"]
    assert "broken" in caplog.text and "unreadable session header" in caplog.text
    await close(backend)


async def test_a_flushed_session_loads_back_event_for_event(store: Store) -> None:
    app = store.app(tool_call("c1", "echo", {"text": "x"}), text("done"), text("two"))
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await run(handle.agent, "second")
    session = handle.agent.session
    await session.flush()  # the barrier: everything appended before it is stored
    assert session.durable_seq == len(session.events) - 1
    header, events = store.open().load("s1")
    assert header.id == "s1"
    assert [e.to_json() for e in events] == [e.to_json() for e in session.events]
    await app.aclose()


async def test_a_resumed_session_continues_history_in_a_later_app(store: Store) -> None:
    app = store.app(text("one"))
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await app.aclose()

    app = store.app(text("two"))
    handle = await app.ctx.agents.resume(resume_session_id="s1")
    await run(handle.agent, "second")
    assert [d["turn"] for d in data(handle.agent, "turn/start")] == [1, 2]
    await app.aclose()
    _, events = store.open().load("s1")
    assert [e.data["turn"] for e in events if e.type == "turn/start"] == [1, 2]


async def test_resume_repairs_a_log_cut_while_a_tool_ran(store: Store) -> None:
    app = store.app(tool_call("c1", "echo", {"text": "x"}), text("done"))
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await app.aclose()
    backend = store.open()
    header, events = backend.load("s1")
    cut = next(i for i, e in enumerate(events) if e.type == "tool/call") + 1
    backend.create(SessionHeader("crashed", created_at=header.created_at, cwd=header.cwd))
    backend.append("crashed", events[:cut])  # the process died while the tool ran
    await close(backend)

    app = store.app(text("recovered"))
    handle = await app.ctx.agents.resume(resume_session_id="crashed")
    agent = handle.agent
    assert types(agent)[-3:] == ["tool/result", "step/end", "turn/end"]
    result = data(agent, "tool/result")[0]
    assert (result["call_id"], result["error"]["code"]) == ("c1", "TOOL_OUTCOME_UNKNOWN")
    assert reasons(agent) == ["interrupted"]
    await run(agent, "again")
    await app.aclose()
    _, stored = store.open().load("crashed")
    assert [e.type for e in stored].count("tool/result") == 1


async def test_a_second_writer_is_refused_naming_the_holder_until_disposal(
    store: Store,
) -> None:
    app = store.app(text("one"))
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    other = store.open()
    with pytest.raises(SessionLockedError) as info:
        other.acquire("s1")
    holder = info.value.holder
    assert (holder["pid"], holder["host"]) == (os.getpid(), socket.gethostname())
    assert str(os.getpid()) in str(info.value)

    second = make_app(persistence=store.open())
    with pytest.raises(SessionLockedError):
        await second.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    assert second.agent_loop.list() == []

    await handle.dispose()
    other.acquire("s1").release()
    await app.aclose()
    await second.aclose()
    await close(other)


@pytest.fixture
def holder_of(store: Store) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, store.kind, store.where, store.schema],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked"  # synchronises on the lock
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


async def test_another_process_holding_the_session_is_named_by_pid(
    store: Store, holder_of: Callable[[], subprocess.Popen[str]]
) -> None:
    store.open().create(SessionHeader("s1", created_at=1.0))
    proc = holder_of()
    app = store.app(text("one"))
    with pytest.raises(SessionLockedError) as info:
        await app.ctx.agents.resume(resume_session_id="s1")
    assert info.value.holder.get("pid") == proc.pid
    await app.aclose()


async def test_a_killed_holder_never_bricks_the_session(
    store: Store, holder_of: Callable[[], subprocess.Popen[str]]
) -> None:
    store.open().create(SessionHeader("s1", created_at=1.0))
    proc = holder_of()
    proc.kill()
    proc.wait()
    backend = store.open()
    await wait_until_acquired(backend, "s1")
    await close(backend)


async def wait_until_acquired(backend: Any, id: str) -> None:
    """Acquire ``id``. The OS drops a file lock as the holder dies; PostgreSQL drops an
    advisory lock when the server notices the closed connection, a moment later: retry on
    ``SessionLockedError`` only, bounded by ``WAIT``."""
    with anyio.fail_after(WAIT):
        while True:
            try:
                backend.acquire(id).release()
                return
            except SessionLockedError:
                await anyio.sleep(0.02)


async def test_a_stored_session_removed_under_the_writer_fails_its_flush(store: Store) -> None:
    app = store.app(text("one"), text("two"))
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await handle.agent.session.flush()
    remove_stored(store, "s1")
    handle.agent.session.append("agent/note", {"text": "lost"})
    with pytest.raises(ExceptionGroup) as info:  # flush gathers its listeners' failures
        await handle.agent.session.flush()
    assert info.group_contains(PersistenceError, match="s1")
    await handle.dispose()
    await app.aclose()


def remove_stored(store: Store, id: str) -> None:
    if store.kind == "jsonl":
        os.remove(Path(store.where) / f"{id}.jsonl")
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(store.where, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {}.agentloop_sessions WHERE id = %s").format(
                sql.Identifier(store.schema)
            ),
            (id,),
        )


async def test_app_takes_a_postgres_url_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if DB_URL is None:
        pytest.skip("no PostgreSQL: AGENTLOOP_TEST_DATABASE_URL is unset")
    app = App(persistence_url=DB_URL)
    assert isinstance(app.persistence, PostgresPersistence)
    assert DB_URL not in repr(app) and DB_URL not in repr(app.config)
    await app.aclose()
    monkeypatch.setenv("AGENTLOOP_DATABASE_URL", DB_URL)
    app = App()
    assert isinstance(app.persistence, PostgresPersistence)
    await app.aclose()
    app = App(persistence_root="unused")  # an explicit backend wins over the environment
    assert isinstance(app.persistence, JsonlPersistence)
    await app.aclose()


def test_a_persistence_url_that_is_not_postgres_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="persistence_url"):
        App(persistence_url="mysql://x")
