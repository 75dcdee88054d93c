"""``JsonlPersistence``: one ``<root>/<id>.jsonl`` file per session, written behind the loop.

File format: line 1 is the header (``SessionHeader.to_json()``), then one compact JSON event per
line (``SessionEvent.to_json()``), each terminated by ``"\\n"``. A batch is written with a single
``write`` on an ``O_APPEND`` descriptor, so a crash can only tear the *last* line; committed lines
are never rewritten; a torn final record a crash left behind is cut off before this backend
first appends to that file (the reader drops exactly the same record, see ``_jsonl_codec``).

One writer per session: ``<id>.jsonl.lock`` carries an exclusive OS lock while a session is
attached (see ``_lock``), and every write first checks that the file is what this writer last
wrote or loaded. A failed write is cut back to the last whole line and recorded for the session:
every later ``session/flush`` of it raises the same ``PersistenceError`` and nothing more is
written for it, until the session is disposed and resumed.

Write-behind: ``install(ctx)`` subscribes ``session/created`` / ``event`` / ``flush`` /
``disposed``. The ``session/event`` listener only puts ``(session, event)`` on a queue (O(1),
never blocks); a worker thread owned by this object (started lazily, stopped by ``aclose``)
drains the queue in batches, encodes and writes them, and advances ``session.durable_seq``.
``session/flush`` puts a marker on the same FIFO and awaits it, so it returns once everything
appended before it is written (or raises the session's ``PersistenceError``).
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import contextlib
import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any

import anyio
import anyio.to_thread

from .._disposer import Disposer
from ._events import SessionEvent, SessionHeader
from ._jsonl_codec import encode_lines, has_header, parse_log, torn_tail_start
from ._jsonl_io import Stamp, changed_error, persistence_error, stamp, write_all
from ._listing import StoredSession, headers_of, scan_directory
from ._lock import Held, LockTable, release_all
from ._persistence import (
    Lease,
    PersistenceError,
    SessionCorruptError,
    SessionLockedError,
    SessionNotFoundError,
    Subscriber,
    install_write_behind,
    reserve,
)
from ._session import Session, SessionEventPayload, SessionPayload

__all__ = ["JsonlPersistence"]

_log = logging.getLogger("agentloop_nb")
_BATCH = 16384  # queue items folded into one write round


class _Control:
    """A non-event queue item, run by the worker after everything queued before it."""

    def run(self, backend: JsonlPersistence) -> bool:  # True: stop the worker
        raise NotImplementedError


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # the waiter was cancelled
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class _Waiter(_Control):
    def __init__(self, future: asyncio.Future[None] | None) -> None:
        self.future = future
        self.loop = future.get_loop() if future is not None else None

    def resolve(self, error: BaseException | None = None) -> None:
        if self.future is None or self.loop is None:
            return
        # A closed loop raises RuntimeError: then nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_settle, self.future, error)


class _Open(_Control):
    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, backend: JsonlPersistence) -> bool:
        backend._catch_up(self.session)
        return False


class _Flush(_Waiter):
    def __init__(self, session: Session, future: asyncio.Future[None]) -> None:
        super().__init__(future)
        self.session = session

    def run(self, backend: JsonlPersistence) -> bool:
        backend._catch_up(self.session)
        self.resolve(backend._errors.get(self.session))
        return False


class _Close(_Control):
    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, backend: JsonlPersistence) -> bool:
        backend._written.pop(self.session, None)
        backend._errors.pop(self.session, None)
        backend._release(self.session)
        return False


class _Stop(_Waiter):
    def run(self, backend: JsonlPersistence) -> bool:
        self.resolve()
        return True


def _atexit_close(ref: weakref.ref[JsonlPersistence]) -> None:
    backend = ref()
    if backend is not None:
        backend.close(timeout=10.0)


class JsonlPersistence:
    """The embedded persistence backend: ``<root>/<id>.jsonl`` per session.

    ``root`` defaults to ``.agentloop/sessions`` (relative to the process cwd, created on first
    write). ``fsync=True`` makes every batch reach the disk before it counts as durable (slower).
    Session ids must be usable as file names (no path separators, not ``.``/``..``).

    One writer per session: while a session is attached (from its creation, or from
    ``acquire`` before a resume, until its disposal) this backend holds an exclusive OS lock on
    ``<id>.jsonl.lock``; another backend (another App, notebook or process) that creates or
    resumes the id gets ``SessionLockedError``. Before every write the file is checked to be
    exactly what this writer last wrote (or loaded); otherwise the write fails with
    ``PersistenceError``.
    """

    def __init__(
        self, root: str | os.PathLike[str] = ".agentloop/sessions", *, fsync: bool = False
    ):
        self.root = Path(root)
        self.fsync = fsync
        self._locks = LockTable()
        weakref.finalize(self, release_all, self._locks)
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running = False
        self._start_lock = threading.Lock()
        # Worker-thread state, keyed by session object (ids can be reused after detach).
        self._written: builtins.dict[Session, int] = {}
        self._errors: dict[Session, PersistenceError] = {}
        # Ids whose file tail this instance has verified (or written itself): only the first
        # append to a file that another run left behind may have a torn tail to cut.
        self._checked: set[str] = set()
        self._stamps: dict[str, Stamp] = {}  # per id: the file as this writer left it
        self._loaded: dict[str, Stamp] = {}  # per id: the file as ``load`` last read it
        self._atexit: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"JsonlPersistence(root={str(self.root)!r})"

    # -- the seam (synchronous primitives) ------------------------------------------------

    def path(self, id: str) -> Path:
        """The file of session ``id``. ``ValueError`` when ``id`` is not a safe file name."""
        if type(id) is not str or not id or id in (".", ".."):
            raise ValueError(f"session id {id!r} cannot be used as a file name")
        for bad in {"/", "\\", "\x00", os.sep, os.altsep or "/"}:
            if bad in id:
                raise ValueError(
                    f"session id {id!r} cannot be used as a file name: it contains {bad!r}; "
                    "use letters, digits, '-', '_' or '.'"
                )
        return self.root / f"{id}.jsonl"

    def acquire(self, id: str) -> Lease:
        """Reserve the writer lock of session ``id`` before loading it to resume it.

        Raises ``SessionLockedError`` (naming the holder's pid and host) when another writer
        has the session attached, ``PersistenceError`` when the lock file cannot be opened,
        ``ValueError`` for an id that is not a file name. Returns a lease: the session's
        publication (``session/created``) adopts the lock, and its disposal releases it; call
        ``lease.release()`` when the resume fails before publication. When this backend
        already has the id attached to a live session the lease is empty (the session store
        reports that conflict).
        """
        path = self.path(id)
        with self._locks.mutex:
            return reserve(self._locks.get(id), lambda: self._take(id, path), self._unlock)

    def _unlock(self, held: Held) -> None:
        # A method of the backend, so a lease keeps the backend (and its lock files) alive.
        self._locks.release(held)

    def _take(self, id: str, path: Path) -> Held:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return self._locks.take(id, Path(f"{path}.lock"))
        except OSError as exc:
            raise persistence_error(id, Path(f"{path}.lock"), exc, "lock") from exc

    def create(self, header: SessionHeader) -> None:
        """Create ``<root>/<id>.jsonl`` holding just the header line. ``FileExistsError`` when the
        session is already stored (never overwritten). A file with no complete header line is
        what a crash during ``create`` leaves behind: it holds no session and is replaced."""
        path = self.path(header.id)
        self.root.mkdir(parents=True, exist_ok=True)
        line = header.to_json().encode("utf-8") + b"\n"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if self._stored(path):
                raise FileExistsError(
                    f"session {header.id!r} is already stored at {path.resolve()}; resume it or "
                    "choose another id"
                ) from None
            _log.warning("%s: replacing a file with no header line (a crash during create)", path)
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            write_all(fd, line, 0)
            if self.fsync:
                os.fsync(fd)
            self._stamps[header.id] = stamp(os.fstat(fd))
        finally:
            os.close(fd)
        self._checked.add(header.id)

    @staticmethod
    def _stored(path: Path) -> bool:
        """Whether ``path`` holds a session (a complete header line)."""
        try:
            with open(path, "rb") as f:
                return has_header(f)
        except FileNotFoundError:
            return False

    def append(self, id: str, events: Sequence[SessionEvent]) -> None:
        """Append events as lines with one ``write``. ``FileNotFoundError`` if the session file
        is missing; ``PersistenceError`` if it is not what this writer last wrote or loaded
        (another writer, or a replaced file). The first append to a file this instance did not
        create first cuts a torn final record left by a crash. A failed write is cut back, so
        no half-written line stays behind."""
        if not events:
            return
        path = self.path(id)
        blob = encode_lines(events)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            st = os.fstat(fd)
            known = self._stamps.get(id)
            if known is not None and stamp(st) != known:
                raise changed_error(id, path, known, st)
            size = st.st_size
            if id not in self._checked:
                size = self._trim_tail(fd, path, size)
                self._checked.add(id)
            write_all(fd, blob, size)
            if self.fsync:
                os.fsync(fd)
            self._stamps[id] = stamp(os.fstat(fd))
        finally:
            os.close(fd)

    @staticmethod
    def _trim_tail(fd: int, path: Path, size: int) -> int:
        """Cut a torn final record left by a crash (the same rule ``load`` applies), so new
        lines never follow garbage; returns the new size. Judged from the file itself."""
        if size == 0:
            raise SessionCorruptError(path.resolve(), 1, "the file is empty (no header line)")
        with open(path, "rb") as f:
            start = torn_tail_start(f, size, path.resolve())
        if start < size:
            _log.warning("%s: discarding a torn final record (%d bytes)", path, size - start)
            os.ftruncate(fd, start)
        return start

    def load(self, id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """Read a stored session. A torn final record (no newline, or not valid) is ignored;
        a bad line before it — garbage, an invalid event, a surface event that is not a valid
        message, a record nested too deeply — raises ``SessionCorruptError`` naming the file
        and line. A missing session, or a file with no complete header line (a crash during
        create), raises ``SessionNotFoundError`` naming the path looked at."""
        path = self.path(id)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                stored = has_header(f)
                f.seek(0)
                raw = f.read() if stored else b""
        except FileNotFoundError:
            stored = False
        if not stored:
            raise SessionNotFoundError(
                f"session {id!r} not found: looked for {path.resolve()} "
                f"(sessions are stored as <id>.jsonl under {self.root.resolve()}; a file "
                "without a complete header line, left by a crash during create, holds none)",
                id=id,
            )
        header, events = parse_log(path.resolve(), id, raw)
        # What a resume will attach to: publication checks the file has not changed since.
        self._loaded[id] = (st.st_ino, len(raw), st.st_mtime_ns)
        return header, events

    def scan(self) -> builtins.list[StoredSession]:
        """Every stored session from its header alone (each file's first line, never its
        events): readable ones oldest first, then the unreadable ones (a bad or oversized
        header, a file that cannot be read, a header naming another id) with the reason.
        Files with no complete header line (a crash during create) hold no session."""
        return scan_directory(self.root)

    def list(self) -> builtins.list[SessionHeader]:
        """Headers of every readable stored session, oldest first (see :meth:`scan`, which
        also reports the unreadable ones; here each is logged as a warning)."""
        return headers_of(self.scan())

    # -- write-behind ----------------------------------------------------------------------

    def install(self, ctx: Subscriber) -> Disposer:
        """Subscribe the write-behind listeners on ``ctx`` (``ctx.on(name, handler)``); the
        returned ``Disposer`` unsubscribes them (queued writes still complete)."""
        return install_write_behind(
            ctx,
            created=self._on_created,
            event=self._on_event,
            flush=self._on_flush,
            disposed=self._on_disposed,
        )

    def _on_created(self, payload: SessionPayload) -> None:
        # Synchronous checks, so a bad id, a second writer or an existing file vetoes the
        # creation (or resume) before anything is published.
        session = payload.session
        path = self.path(session.id)
        with self._locks.mutex:
            held = self._locks.get(session.id)
            fresh = held is None
            if held is None:
                held = self._take(session.id, path)
            elif held.owner is not None and held.owner.state != "detached":
                holder: dict[str, object] = {"pid": os.getpid(), "host": socket.gethostname()}
                raise SessionLockedError(session.id, held.path.resolve(), holder)
            try:
                self._check_attach(session, path)
            except BaseException:
                if fresh:
                    self._locks.release(held)
                raise
            held.owner = session
        self._put(_Open(session))

    def _check_attach(self, session: Session, path: Path) -> None:
        """A new session must not be stored yet; a resumed one must still be what was loaded."""
        if not session.header_durable:
            if self._stored(path):
                raise FileExistsError(
                    f"session {session.id!r} is already stored at {path.resolve()}; resume it "
                    "or choose another id"
                )
            return
        known = self._loaded.pop(session.id, None)
        try:
            now: Stamp | None = stamp(os.stat(path))
        except FileNotFoundError:
            now = None
        if known is not None and now != known:
            raise PersistenceError(
                f"cannot resume session {session.id!r}: {path.resolve()} changed after it was "
                "loaded (another writer appended to it, or it was replaced); resume it again",
                id=session.id,
                path=path.resolve(),
            )
        if now is not None:
            self._stamps[session.id] = now

    def _release(self, session: Session) -> None:
        """Give back the lock ``session`` holds (after its last write)."""
        with self._locks.mutex:
            held = self._locks.get(session.id)
            if held is not None and held.owner is session:
                self._locks.release(held)

    def _on_event(self, payload: SessionEventPayload) -> None:
        self._queue.put((payload.session, payload.event))
        if not self._running:
            self._ensure_worker()

    async def _on_flush(self, payload: SessionPayload) -> None:
        session = payload.session
        error = self._errors.get(session)
        if error is not None:
            raise error
        if session.header_durable and session.durable_seq >= len(session.events) - 1:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._put(_Flush(session, future))
        await future

    def _on_disposed(self, payload: SessionPayload) -> None:
        session = payload.session
        # Nothing left to write (all durable, or writing failed for good): give the lock back
        # now, so a disposal is followed by a free session at once. The worker's close then
        # only forgets the session (its release finds another owner, or none).
        settled = session in self._errors or (
            session.header_durable and session.durable_seq >= len(session.events) - 1
        )
        if settled:
            self._release(session)
        if self._running:
            self._put(_Close(session))  # otherwise released after its queued writes
        else:
            self._release(session)

    def _put(self, item: Any) -> None:
        self._queue.put(item)
        if not self._running:
            self._ensure_worker()

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._running:
                return
            # A worker that is just stopping exits on its own once it sees this one running.
            self._running = True
            self._thread = threading.Thread(
                target=self._run, name=f"agentloop_nb-jsonl:{self.root}", daemon=True
            )
            self._thread.start()
            if self._atexit is None:
                self._atexit = _make_atexit(self)
                atexit.register(self._atexit)

    async def aclose(self) -> None:
        """Write everything queued, stop the worker (a later event restarts it) and release
        every session lock (sessions still attached are no longer guarded against a second
        writer: closing the backend means this App is done with them)."""
        thread = self._thread
        if thread is None or not self._running:
            self._locks.release_all()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put(_Stop(future))
        with anyio.CancelScope(shield=True):
            await future
            await anyio.to_thread.run_sync(thread.join)
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        self._locks.release_all()

    def close(self, timeout: float | None = None) -> None:
        """Synchronous ``aclose`` (used at interpreter exit): drain and stop the worker."""
        thread = self._thread
        if thread is None or not self._running:
            return
        self._queue.put(_Stop(None))
        thread.join(timeout)

    # -- the worker thread -----------------------------------------------------------------

    def _run(self) -> None:
        queue = self._queue
        get, get_nowait = queue.get, queue.get_nowait
        while True:
            stop = False
            while not stop:
                items = [get()]
                try:
                    while len(items) < _BATCH:
                        items.append(get_nowait())
                except Empty:
                    pass
                try:
                    stop = self._process(items)
                except Exception:  # a bug must not silently kill durability
                    _log.exception("agentloop_nb JSONL writer failed")
            with self._start_lock:
                self._running = False
            # An item put while we were stopping may have seen ``_running`` still true: keep
            # going unless a producer has already started a new worker.
            if queue.empty():
                return
            with self._start_lock:
                if self._running:
                    return
                self._running = True

    def _process(self, items: builtins.list[Any]) -> bool:
        pending: dict[Session, builtins.list[SessionEvent]] = {}
        for item in items:
            if type(item) is tuple:
                session, event = item
                batch = pending.get(session)
                if batch is None:
                    pending[session] = [event]
                else:
                    batch.append(event)
                continue
            for session, events in pending.items():
                self._write(session, events)
            pending.clear()
            try:
                if item.run(self):
                    return True
            except Exception as exc:  # never strand a flush waiter behind a bug
                _log.exception("agentloop_nb JSONL writer failed")
                if isinstance(item, _Waiter):
                    item.resolve(exc)
        for session, events in pending.items():
            self._write(session, events)
        return False

    def _catch_up(self, session: Session) -> None:
        self._write(session, [])

    def _write(self, session: Session, events: builtins.list[SessionEvent]) -> None:
        """Write ``events`` (plus any gap before them, and for a catch-up everything logged)."""
        if session in self._errors:
            return
        try:
            last = self._written.get(session)
            if last is None:
                if not session.header_durable:
                    self.create(session.header)
                    session.mark_durable(-1)
                last = session.durable_seq
            upto = events[-1].seq if events else len(session.events) - 1
            if upto <= last:
                return
            if not events or events[0].seq != last + 1:
                # A gap (pre-publication events, or a backend installed late): read the log.
                todo: Sequence[SessionEvent] = session.events[last + 1 : upto + 1]
            else:
                todo = events
            self.append(session.id, todo)
        except Exception as exc:
            error = persistence_error(
                session.id, self.path(session.id), exc, "write", session.durable_seq
            )
            _log.error("%s", error)
            self._errors[session] = error
            return
        self._written[session] = upto
        session.mark_durable(upto)


def _make_atexit(backend: JsonlPersistence) -> Callable[[], None]:
    ref = weakref.ref(backend)
    return lambda: _atexit_close(ref)
