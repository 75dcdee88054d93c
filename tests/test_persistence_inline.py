"""Where the JSONL backend's writes run: on the event loop's thread at a flush when its writer
thread is idle, on the writer thread otherwise (``docs/architecture.md``, "The turn's flushes
on the loop thread, session 17")."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentloop_nb.context import Context
from agentloop_nb.session import JsonlPersistence, SessionEvent, SessionStore, _writebehind

WRITER = "writer"  # what ``RecordingPersistence`` records for the backend's writer thread


def thread_label() -> str:
    name = threading.current_thread().name
    return WRITER if name.startswith("agentloop_nb-") else name


class RecordingPersistence(JsonlPersistence):
    """Records, per append, the event types written and the name of the thread writing them;
    ``written`` is set after each append."""

    def __init__(self, root: Path, *, fsync: bool = False, delay: float = 0.0) -> None:
        super().__init__(root, fsync=fsync)
        self.appends: list[tuple[list[str], str]] = []
        self.written = threading.Event()
        self.delay = delay  # seconds each append takes: a slow disk

    def append(self, id: str, events: Sequence[SessionEvent]) -> None:
        if self.delay:
            threading.Event().wait(self.delay)  # the slow disk under test, not a synchronisation
        super().append(id, events)
        self.appends.append(([e.type for e in events], thread_label()))
        self.written.set()

    def threads_of(self, type: str) -> list[str]:
        return [thread for types, thread in self.appends if type in types]


def writers_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("agentloop_nb-") and t.is_alive()]


@pytest.fixture
def no_hand_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only a flush writes what the test appends: the hand-off to the writer never comes due
    during the test (so no test depends on how long its steps take)."""
    monkeypatch.setattr(_writebehind, "HAND_OFF_AFTER", 3600.0)
    yield


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored, as ipykernel leaves it between cells: no ``KeyboardInterrupt`` can land
    on the loop's thread, so a flush may write there."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """The default SIGINT handler, as ipykernel installs it while a cell executes."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


async def idle_backend(backend: RecordingPersistence, id: str) -> tuple[SessionStore, Any]:
    """A store and its session ``id`` written by ``backend``, its header written and the
    writer thread stopped."""
    ctx = Context()
    backend.install(ctx)
    store = SessionStore(ctx)
    session = store.create(id)
    await session.flush()
    await backend.aclose()  # the writer that wrote the header stops; the session stays
    return store, session


async def flush_each(session: Any, backend: RecordingPersistence, *names: str) -> list[list[str]]:
    """Append and flush each of ``names`` in turn; per name, the threads that wrote it."""
    threads = []
    for name in names:
        session.append(name)
        await session.flush()
        threads.append(backend.threads_of(name))
    return threads


@pytest.mark.anyio
@pytest.mark.usefixtures("no_hand_off", "sigint_ignored")
async def test_a_flush_with_the_writer_idle_writes_on_the_loop_thread_and_starts_no_writer(
    tmp_path: Path,
) -> None:
    backend = RecordingPersistence(tmp_path)
    _, session = await idle_backend(backend, "inline")
    threads_before = {t.ident for t in writers_alive()}
    session.append("a")
    session.append("b")
    await session.flush()
    assert backend.threads_of("a") == [threading.current_thread().name]
    assert backend.threads_of("b") == backend.threads_of("a")  # one write for both
    assert session.durable_seq == 1
    assert {t.ident for t in writers_alive()} == threads_before
    assert [e.type for e in backend.load("inline")[1]] == ["a", "b"]
    session.append("c")  # the session is watched again after the inline write
    await session.flush()
    assert backend.threads_of("c") == [threading.current_thread().name]
    assert [e.type for e in backend.load("inline")[1]] == ["a", "b", "c"]
    await backend.aclose()


@pytest.mark.anyio
async def test_without_a_flush_the_writer_thread_writes_what_was_appended(
    tmp_path: Path,
) -> None:
    backend = RecordingPersistence(tmp_path)
    _, session = await idle_backend(backend, "later")
    backend.written.clear()
    session.append("a")
    await anyio.to_thread.run_sync(backend.written.wait)  # the hand-off comes due meanwhile
    assert backend.threads_of("a") == [WRITER]
    assert session.durable_seq == 0
    await backend.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_hand_off")
@pytest.mark.parametrize("why", ["fsync", "interrupt"])
async def test_a_flush_with_fsync_or_where_an_interrupt_could_land_is_the_writers(
    tmp_path: Path, why: str, request: pytest.FixtureRequest
) -> None:
    # each reason alone: with fsync SIGINT is ignored (as between cells), without it the
    # default handler is in place (as while a cell executes)
    request.getfixturevalue("sigint_ignored" if why == "fsync" else "sigint_raises")
    backend = RecordingPersistence(tmp_path, fsync=why == "fsync")
    _, session = await idle_backend(backend, why)
    assert await flush_each(session, backend, "a", "b") == [[WRITER], [WRITER]]
    await backend.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_hand_off", "sigint_ignored")
async def test_a_slow_write_on_the_loop_thread_sends_every_later_write_to_the_writer(
    tmp_path: Path,
) -> None:
    # slower than the bound by half again: the first inline write is slow on any machine
    backend = RecordingPersistence(tmp_path, delay=_writebehind.SLOW_INLINE * 1.5)
    _, session = await idle_backend(backend, "slow")
    session.append("a")
    await session.flush()
    assert backend.threads_of("a") == [threading.current_thread().name]
    backend.delay = 0.0
    assert await flush_each(session, backend, "b", "c") == [[WRITER], [WRITER]]
    assert [e.type for e in backend.load("slow")[1]] == ["a", "b", "c"]
    await backend.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_hand_off")
@pytest.mark.parametrize("end", ["dispose", "close"])
async def test_events_not_handed_off_yet_are_written_at_a_disposal_or_when_the_backend_closes(
    tmp_path: Path, end: str
) -> None:
    backend = RecordingPersistence(tmp_path)
    store, session = await idle_backend(backend, end)
    session.append("last")
    if end == "dispose":
        store.detach(session)  # no flush: disposing hands its events to the writer
    await backend.aclose()  # no flush either: closing hands them off first
    assert backend.threads_of("last") == [WRITER]
    assert [e.type for e in backend.load(end)[1]] == ["last"]


def test_appends_outside_an_event_loop_go_straight_to_the_writer(tmp_path: Path) -> None:
    backend = RecordingPersistence(tmp_path)
    ctx = Context()
    backend.install(ctx)
    session = SessionStore(ctx).create("sync")
    session.append("a")
    backend.close(timeout=30)  # drains the queue (a bound on a hang, not a measurement)
    assert backend.threads_of("a") == [WRITER]
    assert [e.type for e in backend.load("sync")[1]] == ["a"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_hand_off", "sigint_ignored")
async def test_a_flush_of_a_long_backlog_leaves_it_to_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_writebehind, "INLINE_MAX", 2)
    backend = RecordingPersistence(tmp_path)
    _, session = await idle_backend(backend, "long")
    session.append("a")
    session.append("b")
    await session.flush()  # two events: written inline
    assert backend.threads_of("a") == [threading.current_thread().name]
    for name in ("c", "d", "e"):
        session.append(name)
    await session.flush()  # three: the writer's
    assert backend.threads_of("c") == [WRITER]
    assert [e.type for e in backend.load("long")[1]] == ["a", "b", "c", "d", "e"]
    await backend.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_hand_off")
async def test_closing_at_exit_with_no_writer_running_writes_what_waits(tmp_path: Path) -> None:
    backend = RecordingPersistence(tmp_path)
    _, session = await idle_backend(backend, "exit")
    session.append("a")
    backend.close()  # what interpreter exit runs: no new thread, the caller writes
    assert backend.threads_of("a") == [threading.current_thread().name]
    assert [e.type for e in backend.load("exit")[1]] == ["a"]


EXIT_SCRIPT = """
import asyncio, sys
from agentloop_nb.context import Context
from agentloop_nb.session import JsonlPersistence, SessionStore

async def main():
    backend = JsonlPersistence(sys.argv[1])
    ctx = Context()
    backend.install(ctx)
    session = SessionStore(ctx).create("exit")
    await session.flush()
    session.append("early")  # arms the hand-off
    await backend.aclose()  # writes it; the writer stops and its exit hook goes with it
    session.append("late")  # no flush, and the loop ends before the hand-off comes due

asyncio.run(main())
"""


def test_events_appended_after_aclose_and_never_flushed_are_written_at_exit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,  # a bound on a hang, not a measurement
    )
    assert done.returncode == 0, done.stderr
    assert [e.type for e in JsonlPersistence(tmp_path).load("exit")[1]] == ["early", "late"]


def test_a_hand_off_whose_loop_ended_comes_with_the_next_loops_first_append(
    tmp_path: Path,
) -> None:
    backend = RecordingPersistence(tmp_path)
    ctx = Context()
    backend.install(ctx)
    store = SessionStore(ctx)
    first, second = store.create("first"), store.create("second")

    async def append_then_end() -> None:
        await first.flush()
        await second.flush()
        first.append("a")  # waits for a hand-off on this loop, which ends before it is due

    async def append_and_wait() -> None:
        second.append("b")  # arms the hand-off on this loop: "a" goes with it
        while True:
            backend.written.clear()  # before the check: a write after it is not missed
            if {"a", "b"} <= {t for types, _ in backend.appends for t in types}:
                return
            await anyio.to_thread.run_sync(backend.written.wait)

    asyncio.run(append_then_end())
    asyncio.run(append_and_wait())
    assert backend.threads_of("a") == backend.threads_of("b") == [WRITER]
    backend.close(timeout=30)
    assert [e.type for e in backend.load("first")[1]] == ["a"]
