from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, KeysView, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentloop_nb.context import Context
from agentloop_nb.session import (
    JsonlPersistence,
    Persistence,
    PersistenceError,
    SessionCorruptError,
    SessionEvent,
    SessionHeader,
    SessionNotFoundError,
    SessionStore,
    repair,
)


class FakeBus:
    """Context-like dispatch: ``on``, contained ``emit``, strict ``emit_strict`` and a
    ``parallel`` that raises an ExceptionGroup after all listeners settle."""

    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[[Any], Any]]] = {}

    def on(
        self, name: str, handler: Callable[[Any], Any], *, prepend: bool = False
    ) -> Callable[[], None]:
        self.listeners.setdefault(name, []).insert(
            0 if prepend else len(self.listeners[name]), handler
        )
        return lambda: self.listeners[name].remove(handler)

    @property
    def listened(self) -> KeysView[str]:
        return self.listeners.keys()

    def emit(self, name: str, payload: Any) -> None:
        for handler in tuple(self.listeners.get(name, ())):
            with contextlib.suppress(Exception):  # a Context logs these; the test drops them
                handler(payload)

    def emit_strict(self, name: str, payload: Any) -> None:
        for handler in tuple(self.listeners.get(name, ())):
            handler(payload)

    async def parallel(self, name: str, payload: Any) -> None:
        async with anyio.create_task_group() as tg:
            for handler in tuple(self.listeners.get(name, ())):
                tg.start_soon(handler, payload)


def user(text: str, id: str) -> dict[str, Any]:
    return {"message": {"id": id, "role": "user", "content": [{"type": "text", "text": text}]}}


def setup(
    root: Path, backend: JsonlPersistence | None = None
) -> tuple[SessionStore, JsonlPersistence]:
    bus = FakeBus()
    persistence = backend if backend is not None else JsonlPersistence(root)
    persistence.install(bus)
    return SessionStore(bus), persistence


def varied_events(session: Any, count: int) -> None:
    """Append ``count`` events mixing chunk, surface, unicode, nested and source-seq shapes."""
    for i in range(count):
        kind = i % 5
        if kind == 0:
            session.append("user/message", user(f"héllo {i} ✓ \u2028", id=f"u{i}"))
        elif kind == 1:
            session.append(
                "assistant/chunk",
                {"turn": 1, "step": i, "chunk": {"type": "text-delta", "index": 0, "text": "x"}},
            )
        elif kind == 2:
            session.append(
                "assistant/message",
                {"turn": 1, "step": i, "message": {"role": "assistant", "content": []}},
                source_event_seqs=[i - 1],
            )
        elif kind == 3:
            session.append("x/nested", {"f": i / 7, "big": 2**70, "n": None, "l": [[], {}, [True]]})
        else:
            session.append(
                "user/message",
                user(f"summary {i}", id=f"s{i}"),
                surface_op={"op": "replace", "start": 0, "end": 0},
            )


@pytest.mark.anyio
async def test_ten_thousand_events_write_and_reload_byte_identically(tmp_path: Path) -> None:
    store, persistence = setup(tmp_path / "a")
    session = store.create("big", meta={"cwd": "/w", "note": "ünïcode"})
    varied_events(session, 10_000)
    await session.flush()
    assert session.durable_seq == 9_999
    await persistence.aclose()

    header, events = persistence.load("big")
    assert header == session.header
    assert events == list(session.events)
    resumed = SessionStore().prepare(header=header, events=events)
    assert resumed.derive_messages() == session.derive_messages()

    # Re-writing what was loaded into a fresh root reproduces the file byte for byte.
    copy = JsonlPersistence(tmp_path / "b")
    copy.create(header)
    copy.append(header.id, events)
    original = (tmp_path / "a" / "big.jsonl").read_bytes()
    assert (tmp_path / "b" / "big.jsonl").read_bytes() == original
    assert original.count(b"\n") == 10_001
    assert isinstance(persistence, Persistence)


class TurnstilePersistence(JsonlPersistence):
    """A disk the test lets through one append at a time (each waits for a permit); every
    append announces itself on ``entered`` first."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.permits = threading.Semaphore(0)

    def append(self, id: str, events: Sequence[SessionEvent]) -> None:
        self.entered.put(len(events))
        self.permits.acquire()
        super().append(id, events)


def turnstile_session(tmp_path: Path, id: str) -> tuple[Context, TurnstilePersistence, Any]:
    """A context with a ``TurnstilePersistence`` installed and a session ``id`` created in it."""
    ctx = Context()
    persistence = TurnstilePersistence(tmp_path)
    persistence.install(ctx)
    return ctx, persistence, SessionStore(ctx).create(id)


@pytest.mark.anyio
async def test_appends_never_wait_for_a_slow_disk_and_flush_waits_for_the_writer(
    tmp_path: Path,
) -> None:
    backend = TurnstilePersistence(tmp_path)
    store, _ = setup(tmp_path, backend)
    session = store.create("slow")
    session.append("first")
    await anyio.to_thread.run_sync(backend.entered.get)  # the writer is now stuck on disk
    for i in range(1_000):
        session.append("more", {"i": i})  # returns while the writer is blocked
    assert len(session.events) == 1_001
    assert session.durable_seq < 1_000

    flushed = anyio.Event()

    async def flush() -> None:
        await session.flush()
        flushed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(flush)
        await anyio.wait_all_tasks_blocked()
        assert not flushed.is_set()
        backend.permits.release(2_000)  # more than one append per event
        await flushed.wait()
    assert session.durable_seq == 1_000
    _, events = backend.load("slow")
    assert len(events) == 1_001
    await backend.aclose()


@pytest.mark.anyio
async def test_seed_events_are_written_on_enter_and_loaded_lines_are_never_rewritten(
    tmp_path: Path,
) -> None:
    store, persistence = setup(tmp_path)
    session = store.create("s", seed=[("seed/a", {"n": 1}), ("seed/b", {"n": 2})])
    session.append("live")
    await session.flush()
    store.detach(session)
    before = (tmp_path / "s.jsonl").read_bytes()

    header, events = persistence.load("s")
    resumed = store.enter(store.prepare(header=header, events=events))
    resumed.append("after/resume")
    await resumed.flush()
    after = (tmp_path / "s.jsonl").read_bytes()
    assert after.startswith(before)
    assert [e.type for e in persistence.load("s")[1]] == [
        "seed/a",
        "seed/b",
        "live",
        "after/resume",
    ]
    await persistence.aclose()


@pytest.mark.anyio
async def test_a_backend_installed_after_creation_catches_up_on_flush(tmp_path: Path) -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    session = store.create("late")
    session.append("before/install")
    persistence = JsonlPersistence(tmp_path)
    persistence.install(bus)
    session.append("after/install")
    await session.flush()
    assert [e.type for e in persistence.load("late")[1]] == ["before/install", "after/install"]
    await persistence.aclose()


def write_session(root: Path, id: str, lines: list[str], tail: str = "") -> Path:
    backend = JsonlPersistence(root)
    backend.create(SessionHeader(id, cwd="/w"))
    backend.append(id, [SessionEvent("e", i, 1.0, {"i": i}) for i in range(len(lines))])
    path = root / f"{id}.jsonl"
    if tail:
        with open(path, "a", encoding="utf-8") as f:
            f.write(tail)
    return path


@pytest.mark.parametrize(
    "tail",
    ['{"type":"e","seq":3,"ti', '{"type":"e","seq":3,"time":1.0,"data":{"i":3}', "garbage\n"],
)
@pytest.mark.anyio
async def test_a_torn_final_line_is_discarded_and_cut_before_the_next_append(
    tmp_path: Path, tail: str
) -> None:
    path = write_session(tmp_path, "torn", ["a", "b", "c"], tail)
    store, persistence = setup(tmp_path)
    header, events = persistence.load("torn")
    assert [e.seq for e in events] == [0, 1, 2]
    session = store.enter(store.prepare(header=header, events=events))
    session.append("resumed")
    await session.flush()
    assert tail not in path.read_text(encoding="utf-8")
    assert [e.type for e in persistence.load("torn")[1]] == ["e", "e", "e", "resumed"]
    await persistence.aclose()


def test_a_corrupt_line_inside_the_committed_prefix_names_file_and_line(tmp_path: Path) -> None:
    path = write_session(tmp_path, "bad", ["a", "b", "c"])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = "{not json\n"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SessionCorruptError) as info:
        JsonlPersistence(tmp_path).load("bad")
    assert info.value.line == 3
    assert str(path.resolve()) in str(info.value) and ":3:" in str(info.value)


def test_a_seq_gap_inside_the_log_is_reported_as_corrupt(tmp_path: Path) -> None:
    path = write_session(tmp_path, "gap", ["a", "b", "c"])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    del lines[2]
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SessionCorruptError, match="expected seq 1"):
        JsonlPersistence(tmp_path).load("gap")


def test_loading_a_missing_session_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(SessionNotFoundError) as info:
        JsonlPersistence(tmp_path / "root").load("nope")
    assert str((tmp_path / "root" / "nope.jsonl").resolve()) in str(info.value)


def test_list_reads_only_header_lines(tmp_path: Path) -> None:
    path = write_session(tmp_path, "one", ["a"])
    with open(path, "a", encoding="utf-8") as f:
        f.write("garbage that would not load\n\x00\x01\n")
    write_session(tmp_path, "two", [])
    (tmp_path / "broken.jsonl").write_text("not a header\n", encoding="utf-8")
    (tmp_path / "ignored.txt").write_text("x", encoding="utf-8")
    assert sorted(h.id for h in JsonlPersistence(tmp_path).list()) == ["one", "two"]
    assert JsonlPersistence(tmp_path / "missing").list() == []


@pytest.mark.parametrize("bad_id", ["a/b", "..", "a\\b", "", "x\x00"])
def test_ids_that_are_not_safe_file_names_are_refused(tmp_path: Path, bad_id: str) -> None:
    persistence = JsonlPersistence(tmp_path)
    with pytest.raises(ValueError, match="cannot be used as a file name"):
        persistence.path(bad_id)
    store, _ = setup(tmp_path, persistence)
    if bad_id:
        with pytest.raises(ValueError, match="file name"):
            store.create(bad_id)  # the created listener vetoes
        assert store.get(bad_id) is None


@pytest.mark.anyio
async def test_creating_a_session_that_is_already_stored_is_vetoed(tmp_path: Path) -> None:
    write_session(tmp_path, "taken", ["a"])
    store, persistence = setup(tmp_path)
    with pytest.raises(FileExistsError, match="'taken' is already stored"):
        store.create("taken")
    assert store.get("taken") is None
    assert len(persistence.load("taken")[1]) == 1


class FailingPersistence(JsonlPersistence):
    def append(self, id: str, events: Sequence[SessionEvent]) -> None:
        raise OSError("disk full")


@pytest.mark.anyio
async def test_a_write_failure_surfaces_at_every_later_flush(tmp_path: Path) -> None:
    backend = FailingPersistence(tmp_path)
    store, _ = setup(tmp_path, backend)
    session = store.create("fail")
    session.append("x")
    for _ in range(2):
        with pytest.raises(ExceptionGroup) as info:
            await session.flush()
        error = info.value.exceptions[0]
        assert isinstance(error, PersistenceError) and "disk full" in str(error)
        assert "'fail'" in str(error)
    await backend.aclose()


@pytest.mark.anyio
async def test_aclose_drains_queued_events_and_a_later_event_restarts_the_writer(
    tmp_path: Path,
) -> None:
    store, persistence = setup(tmp_path)
    session = store.create("drain")
    for i in range(500):
        session.append("e", {"i": i})
    await persistence.aclose()
    assert len(persistence.load("drain")[1]) == 500
    session.append("after/close")
    await session.flush()
    assert len(persistence.load("drain")[1]) == 501
    await persistence.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("subscriber", ["context", "fake bus"])
async def test_an_event_after_aclose_restarts_the_writer_without_a_flush(
    tmp_path: Path, subscriber: str
) -> None:
    bus: Any = Context() if subscriber == "context" else FakeBus()
    persistence = JsonlPersistence(tmp_path)
    persistence.install(bus)
    session = SessionStore(bus).create("again")
    session.append("before")
    await persistence.aclose()
    session.append("after/close")  # no flush: the event itself must start a writer
    await persistence.aclose()  # drains what that writer holds (a no-op without one)
    assert [e.type for e in persistence.load("again")[1]] == ["before", "after/close"]


@pytest.mark.anyio
async def test_aclose_writes_what_arrives_while_the_writer_stops_and_returns(
    tmp_path: Path,
) -> None:
    backend = TurnstilePersistence(tmp_path)
    store, _ = setup(tmp_path, backend)
    session = store.create("busy")
    session.append("a")
    await anyio.to_thread.run_sync(backend.entered.get)  # the writer is on the disk with a
    flushed = anyio.Event()

    async def flush() -> None:
        await session.flush()
        flushed.set()

    with anyio.fail_after(30):  # a bound on a hang, not a measurement
        async with anyio.create_task_group() as tg:
            tg.start_soon(backend.aclose)  # the stop is queued behind a ...
            await anyio.wait_all_tasks_blocked()
            session.append("b")  # ... then b and a flush behind the stop
            tg.start_soon(flush)
            await anyio.wait_all_tasks_blocked()
            backend.permits.release()  # a is written; the stop, b and the flush come next
            await anyio.to_thread.run_sync(backend.entered.get)  # the stopping writer is on b
            session.append("c")  # arrives while the writer stops
            backend.permits.release(10)
    assert flushed.is_set()
    assert [e.type for e in backend.load("busy")[1]] == ["a", "b", "c"]
    session.append("d")  # the writer starts again
    await session.flush()
    assert [e.type for e in backend.load("busy")[1]] == ["a", "b", "c", "d"]
    await backend.aclose()


@pytest.mark.anyio
async def test_uninstalling_stops_the_writer_watching_its_sessions_after_a_restart(
    tmp_path: Path,
) -> None:
    ctx = Context()
    persistence = JsonlPersistence(tmp_path)
    undo = persistence.install(ctx)
    session = SessionStore(ctx).create("restarted")
    # The writer watches the session itself: nobody needs session/event announced.
    assert "session/event" not in ctx.listened
    session.append("x")  # a writer runs
    await persistence.aclose()  # and stops
    session.append("y")  # the same watcher starts another
    await session.flush()
    undo()
    assert not ctx.has_listeners("session/created") and not ctx.has_listeners("session/flush")
    session.append("z")  # nobody writes it
    await persistence.aclose()
    assert [e.type for e in persistence.load("restarted")[1]] == ["x", "y"]


@pytest.mark.anyio
async def test_an_event_a_listener_appends_from_its_handler_is_written_after_the_one_it_saw(
    tmp_path: Path,
) -> None:
    ctx, persistence, session = turnstile_session(tmp_path, "reply")

    def answer(payload: Any) -> None:
        if payload.event.type == "ask":
            session.append("answer")

    ctx.on("session/event", answer)
    await persistence.aclose()  # the writer stops: the next event starts another
    session.append("start")  # a writer starts ...
    await anyio.to_thread.run_sync(persistence.entered.get)  # ... and waits on the disk
    session.append("ask")  # "ask" and "answer" queue up behind it, for one batch
    persistence.permits.release(10)
    await persistence.aclose()  # no flush: only what the writer's batches wrote
    assert [e.type for e in persistence.load("reply")[1]] == ["start", "ask", "answer"]


@pytest.mark.anyio
async def test_what_a_session_logs_while_the_writer_is_on_the_disk_is_written_in_one_append(
    tmp_path: Path,
) -> None:
    _, persistence, session = turnstile_session(tmp_path, "busy")
    session.append("first")
    assert await anyio.to_thread.run_sync(persistence.entered.get) == 1  # on the disk with it
    for i in range(300):
        session.append("more", {"i": i})
    persistence.permits.release(10)
    assert await anyio.to_thread.run_sync(persistence.entered.get) == 300  # one batch
    await session.flush()
    assert [e.seq for e in persistence.load("busy")[1]] == list(range(301))
    session.append("last")  # the session is queued again once the writer has taken it
    await session.flush()
    assert persistence.entered.get_nowait() == 1
    assert len(persistence.load("busy")[1]) == 302
    await persistence.aclose()


@pytest.mark.anyio
async def test_lone_surrogates_round_trip_as_escaped_valid_utf8(tmp_path: Path) -> None:
    store, persistence = setup(tmp_path)
    session = store.create("sur")
    event = session.append("x", {"s": "a\ud800b", "ok": "✓"})
    await session.flush()
    raw = (tmp_path / "sur.jsonl").read_bytes()
    raw.decode("utf-8")  # still valid UTF-8
    assert persistence.load("sur")[1] == [event]
    await persistence.aclose()


@pytest.mark.anyio
async def test_resume_with_repair_persists_the_synthetic_events(tmp_path: Path) -> None:
    store, persistence = setup(tmp_path)
    session = store.create("crash")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("tool/call", {"turn": 1, "step": 1, "call_id": "c", "name": "t"})
    await session.flush()
    store.detach(session)  # the "crash"

    header, events = persistence.load("crash")
    resumed = store.prepare(header=header, events=events)
    added = repair(resumed)
    store.enter(resumed)
    await resumed.flush()
    reloaded = persistence.load("crash")[1]
    assert [e.type for e in reloaded[3:]] == [e.type for e in added]
    assert [e.type for e in added] == ["tool/result", "step/end", "turn/end"]
    await persistence.aclose()


@pytest.mark.anyio
async def test_the_fast_encoder_writes_the_same_bytes_as_the_standard_library(
    tmp_path: Path,
) -> None:
    """Lines are written by orjson; they must equal ``SessionEvent.to_json()`` byte for byte,
    and values orjson refuses (ints beyond 64 bits) fall back to the standard library."""
    store, backend = setup(tmp_path)
    session = store.create("enc")
    session.append("x/text", {"s": 'héllo \u2028 \x1f \x7f / " \\ 😀', "f": 0.1, "e": 1e-300})
    session.append("x/nested", {"a": [1, [2.5, {"k": None}], True], "b": {"": -0}})
    session.append("user/message", user("first", "u1"))
    session.append("x/sourced", {"k": 1}, source_event_seqs=[0])
    session.append(
        "user/message", user("summary", "s1"), surface_op={"op": "replace", "start": 0, "end": 0}
    )
    await session.flush()
    session.append("x/big", {"n": 2**70})  # a batch of its own: the fallback encodes it alone
    await session.flush()
    lines = (tmp_path / "enc.jsonl").read_bytes().splitlines()[1:]
    assert lines == [e.to_json().encode("utf-8") for e in session.events]
    loaded = backend.load("enc")[1]
    assert [e.data for e in loaded] == [e.data for e in session.events]
    await backend.aclose()
