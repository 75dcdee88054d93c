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

Write-behind (``_writebehind.WriteBehind``, shared with the PostgreSQL backend): ``install(ctx)``
subscribes ``session/created`` / ``flush`` / ``disposed`` and watches each session it writes
(``Session.watch_appends``; the watcher only enqueues, O(1)); a worker thread owned by this object writes the batches through ``create`` /
``append`` and advances ``session.durable_seq``; ``session/flush`` is a barrier behind
everything enqueued before it (or raises the session's ``PersistenceError``).
"""

from __future__ import annotations

import builtins
import logging
import os
import socket
import weakref
from collections.abc import Sequence
from pathlib import Path

from ..errors import InvalidValueError
from ._events import SessionEvent, SessionHeader
from ._jsonl_codec import encode_lines, has_header, parse_log, torn_tail_start
from ._jsonl_io import Stamp, changed_error, persistence_error, stamp, write_all
from ._listing import StoredSession, headers_of, scan_directory
from ._lock import Held, LockTable, release_all
from ._persistence import (
    Lease,
    PersistenceError,
    SessionCorruptError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
    reserve,
)
from ._session import Session, SessionPayload
from ._writebehind import WriteBehind

__all__ = ["JsonlPersistence"]

_log = logging.getLogger("agentloop_nb")


class JsonlPersistence(WriteBehind):
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

    _label = "JSONL"

    def __init__(
        self, root: str | os.PathLike[str] = ".agentloop/sessions", *, fsync: bool = False
    ):
        self.root = Path(root)
        self.fsync = fsync
        super().__init__()
        self._worker_name = f"agentloop_nb-jsonl:{self.root}"
        self._locks = LockTable()
        weakref.finalize(self, release_all, self._locks)
        # Ids whose file tail this instance has verified (or written itself): only the first
        # append to a file that another run left behind may have a torn tail to cut.
        self._checked: set[str] = set()
        self._stamps: dict[str, Stamp] = {}  # per id: the file as this writer left it
        self._loaded: dict[str, Stamp] = {}  # per id: the file as ``load`` last read it
        self._files: dict[str, tuple[Path, str]] = {}  # per id: (root, its file) for ``append``

    def __repr__(self) -> str:
        return f"JsonlPersistence(root={str(self.root)!r})"

    # -- the seam (synchronous primitives) ------------------------------------------------

    def path(self, id: str) -> Path:
        """The file of session ``id``. ``ValueError`` when ``id`` is not a safe file name."""
        if type(id) is not str or not id or id in (".", ".."):
            raise InvalidValueError(f"session id {id!r} cannot be used as a file name")
        for bad in {"/", "\\", "\x00", os.sep, os.altsep or "/"}:
            if bad in id:
                raise InvalidValueError(
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
                raise SessionExistsError(
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
        # fast path (benchmarks/bench_ab.py): the file name checked and joined once per id
        # and root (the writer opens the file once per batch; ``path`` builds a ``Path``)
        cached = self._files.get(id)
        if cached is None or cached[0] is not self.root:
            cached = self._files[id] = (self.root, os.fspath(self.path(id)))
        blob = encode_lines(events)
        fd = os.open(cached[1], os.O_WRONLY | os.O_APPEND)
        try:
            st = os.fstat(fd)
            known = self._stamps.get(id)
            if known is not None and stamp(st) != known:
                raise changed_error(id, self.path(id), known, st)
            size = st.st_size
            if id not in self._checked:
                size = self._trim_tail(fd, self.path(id), size)
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

    # -- write-behind (the queue, worker and flush barrier are ``WriteBehind``'s) -------

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
        self._open(session)

    def _check_attach(self, session: Session, path: Path) -> None:
        """A new session must not be stored yet; a resumed one must still be what was loaded."""
        if not session.header_durable:
            if self._stored(path):
                raise SessionExistsError(
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

    def _writes_inline(self) -> bool:
        # A write without fsync lands in the page cache: quicker than two thread hops.
        return not self.fsync

    def _store_header(self, header: SessionHeader) -> None:
        self.create(header)

    def _store_events(self, id: str, events: Sequence[SessionEvent]) -> None:
        self.append(id, events)

    def _failure(self, session: Session, exc: Exception) -> PersistenceError:
        return persistence_error(
            session.id, self.path(session.id), exc, "write", session.durable_seq
        )

    def _closed(self) -> None:
        # Sessions still attached are no longer guarded against a second writer: closing the
        # backend means this App is done with them.
        self._locks.release_all()
