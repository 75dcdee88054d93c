"""``JsonlPersistence``: one ``<root>/<id>.jsonl`` file per session, written behind the loop.

File format: line 1 is the header (``SessionHeader.to_json()``), then one compact JSON event per
line (``SessionEvent.to_json()``), each terminated by ``"\\n"``. A batch is written with a single
``write`` on an ``O_APPEND`` descriptor, so a crash can only tear the *last* line; committed lines
are never rewritten; a torn tail a crash left behind is cut off before this backend first
appends to that file.

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
import gc
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, Protocol

import anyio
import anyio.to_thread
import orjson

from .._disposer import Disposer
from ._events import SessionEvent, SessionHeader, make_event, normalize_surface_op
from ._frozen import EMPTY, FrozenDict, _make
from ._persistence import PersistenceError, SessionCorruptError, SessionNotFoundError
from ._session import Session, SessionEventPayload, SessionPayload

__all__ = ["JsonlPersistence"]

_log = logging.getLogger("agentloop_nb")
_BATCH = 16384  # queue items folded into one write round


class _Subscriber(Protocol):
    def on(self, name: str, handler: Callable[[Any], Any], /) -> Any: ...


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not lossless JSON")


_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


def _freeze_loaded(value: Any) -> Any:
    # Decoded JSON has only str keys, no cycles and (with _reject_constant) finite floats, so
    # freezing needs no checks: dicts -> FrozenDict, lists -> tuples.
    t = type(value)
    if t is dict:
        return _make(
            {
                k: v if (tv := type(v)) is not dict and tv is not list else _freeze_loaded(v)
                for k, v in value.items()
            }
        )
    if t is list:
        return tuple(
            v if (tv := type(v)) is not dict and tv is not list else _freeze_loaded(v)
            for v in value
        )
    return value


def _event_from_line(obj: Any, seq: int) -> SessionEvent:
    if type(obj) is not dict:
        raise ValueError("not a JSON object")
    if obj.get("seq") != seq:
        raise ValueError(f"expected seq {seq}, found {obj.get('seq')!r}")
    kind, when, data = obj.get("type"), obj.get("time"), obj.get("data")
    if type(kind) is not str or not kind:
        raise ValueError("missing event type")
    if type(when) is not float:
        if type(when) is not int:
            raise ValueError("missing or invalid time")
        when = float(when)
    if data is None:
        frozen: FrozenDict = EMPTY
    elif type(data) is dict:
        frozen = _freeze_loaded(data)
    else:
        raise ValueError("data is not a JSON object")
    op = obj.get("surface_op")
    seqs = obj.get("source_event_seqs")
    if op is None and seqs is None and len(obj) <= 4:
        return make_event(kind, seq, when, frozen)
    return SessionEvent(kind, seq, when, frozen, normalize_surface_op(op, kind), seqs)


_dumps = orjson.dumps
_encode_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode


def _encode_lines(events: Sequence[SessionEvent]) -> bytes:
    """One JSONL line per event. orjson writes the same compact bytes as ``to_json`` about six
    times faster (this runs once per streamed chunk); anything it refuses (ints beyond 64 bits,
    lone surrogates) takes the standard-library path."""
    try:
        return b"".join([_dumps(event.to_dict()) + b"\n" for event in events])
    except (TypeError, orjson.JSONEncodeError):
        pass
    text = "".join([event.to_json() + "\n" for event in events])
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return b"".join([_line_bytes(event) for event in events])


def _line_bytes(event: SessionEvent) -> bytes:
    try:
        return event.to_json().encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate has no UTF-8 form: \u-escape this line (still lossless JSON).
        return _encode_ascii(event.to_dict()).encode("ascii") + b"\n"


def _rfind_newline(f: Any, end: int) -> int:
    """Offset of the last ``\n`` before ``end`` in binary file ``f`` (``-1``: none)."""
    chunk = 1 << 16
    while end > 0:
        start = max(0, end - chunk)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


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
    """The embedded persistence backend: ``<root>/<id>.jsonl`` per session (SPEC §3.2).

    ``root`` defaults to ``.agentloop/sessions`` (relative to the process cwd, created on first
    write). ``fsync=True`` makes every batch reach the disk before it counts as durable (slower).
    Session ids must be usable as file names (no path separators, not ``.``/``..``).
    """

    def __init__(
        self, root: str | os.PathLike[str] = ".agentloop/sessions", *, fsync: bool = False
    ):
        self.root = Path(root)
        self.fsync = fsync
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

    def create(self, header: SessionHeader) -> None:
        """Create ``<root>/<id>.jsonl`` holding just the header line. ``FileExistsError`` when the
        session is already stored (never overwritten)."""
        path = self.path(header.id)
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "xb") as f:
                f.write(header.to_json().encode("utf-8") + b"\n")
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except FileExistsError:
            raise FileExistsError(
                f"session {header.id!r} is already stored at {path.resolve()}; resume it or "
                "choose another id"
            ) from None
        self._checked.add(header.id)

    def append(self, id: str, events: Sequence[SessionEvent]) -> None:
        """Append events as lines with one ``write``. ``FileNotFoundError`` if the session was
        never created. The first append to a file this instance did not create first cuts a
        torn final record left by a crash."""
        if not events:
            return
        path = self.path(id)
        blob = _encode_lines(events)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if id not in self._checked:
                self._trim_tail(fd, path)
                self._checked.add(id)
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _trim_tail(fd: int, path: Path) -> None:
        """Cut a torn final record (unterminated, or a terminated line that is not JSON) left
        by a crash, so new lines never follow garbage. Judged from the file itself, never from
        an earlier ``load``: the file may have grown since."""
        size = os.fstat(fd).st_size
        if size == 0:
            raise SessionCorruptError(path.resolve(), 1, "the file is empty (no header line)")
        with open(path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                start = _rfind_newline(f, size) + 1
            else:
                start = _rfind_newline(f, size - 1) + 1
                f.seek(start)
                try:
                    _decode(f.read(size - start).decode("utf-8"))
                    return
                except ValueError:  # UnicodeDecodeError included
                    pass
        if start == 0:
            raise SessionCorruptError(path.resolve(), 1, "the header line is incomplete")
        _log.warning("%s: discarding a torn final record (%d bytes)", path, size - start)
        os.ftruncate(fd, start)

    def load(self, id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """Read a stored session. A torn final line (no newline, or not valid) is ignored;
        a bad line before it raises ``SessionCorruptError`` naming the file and line; a missing
        session raises ``SessionNotFoundError`` naming the path looked at."""
        path = self.path(id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise SessionNotFoundError(
                f"session {id!r} not found: looked for {path.resolve()} "
                f"(sessions are stored as <id>.jsonl under {self.root.resolve()})",
                id=id,
            ) from None
        cut = raw.rfind(b"\n") + 1  # bytes after ``cut`` are a torn (unterminated) line
        if cut == 0:
            raise SessionCorruptError(path.resolve(), 1, "the header line is incomplete")
        try:
            text = raw[:cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            last = raw.count(b"\n", 0, cut)
            if line != last or line == 1:
                raise SessionCorruptError(path.resolve(), line, "invalid UTF-8") from None
            cut = raw.rfind(b"\n", 0, cut - 1) + 1
            text = raw[:cut].decode("utf-8")
        lines = text.split("\n")
        lines.pop()  # the empty string after the final newline
        try:
            header = SessionHeader.from_dict(_decode(lines[0]))
        except (ValueError, TypeError) as exc:
            raise SessionCorruptError(path.resolve(), 1, f"bad header: {exc}") from None
        if header.id != id:
            raise SessionCorruptError(
                path.resolve(), 1, f"the header names session {header.id!r}, not {id!r}"
            )
        events: builtins.list[SessionEvent] = []
        append = events.append
        last_index = len(lines) - 1
        # Loading builds only acyclic objects; pausing the cyclic GC avoids repeated full
        # collections over a growing heap (several times the cost of parsing a large log).
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            for index in range(1, len(lines)):
                try:
                    obj = _decode(lines[index])
                except ValueError as exc:
                    if index == last_index:
                        break  # an unparseable final line is a torn write, never committed
                    raise SessionCorruptError(path.resolve(), index + 1, str(exc)) from None
                try:
                    append(_event_from_line(obj, index - 1))
                except (ValueError, TypeError) as exc:
                    raise SessionCorruptError(path.resolve(), index + 1, str(exc)) from None
        finally:
            if gc_enabled:
                gc.enable()
        return header, events

    def list(self) -> builtins.list[SessionHeader]:
        """Headers of every stored session (reads only each file's first line; files whose
        header cannot be read are skipped with a warning), oldest first."""
        headers: builtins.list[SessionHeader] = []
        if not self.root.is_dir():
            return headers
        for path in sorted(self.root.glob("*.jsonl")):
            try:
                with open(path, "rb") as f:
                    first = f.readline()
                if not first.endswith(b"\n"):
                    raise ValueError("the header line is incomplete")
                headers.append(SessionHeader.from_dict(_decode(first.decode("utf-8"))))
            except (OSError, ValueError, TypeError) as exc:
                _log.warning("%s: skipped, unreadable session header (%s)", path, exc)
        headers.sort(key=lambda h: (h.created_at, h.id))
        return headers

    # -- write-behind ----------------------------------------------------------------------

    def install(self, ctx: _Subscriber) -> Disposer:
        """Subscribe the write-behind listeners on ``ctx`` (``ctx.on(name, handler)``); the
        returned ``Disposer`` unsubscribes them (queued writes still complete)."""
        disposers = [
            ctx.on("session/created", self._on_created),
            ctx.on("session/event", self._on_event),
            ctx.on("session/flush", self._on_flush),
            ctx.on("session/disposed", self._on_disposed),
        ]

        def undo() -> None:
            for dispose in reversed(disposers):
                dispose()

        return Disposer(undo)

    def _on_created(self, payload: SessionPayload) -> None:
        # Synchronous checks so a bad id or an existing file vetoes creation up front.
        session = payload.session
        path = self.path(session.id)
        if not session.header_durable and path.exists():
            raise FileExistsError(
                f"session {session.id!r} is already stored at {path.resolve()}; resume it or "
                "choose another id"
            )
        self._put(_Open(session))

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
        if self._running:
            self._put(_Close(payload.session))

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
        """Write everything queued, then stop the worker (a later event restarts it)."""
        thread = self._thread
        if thread is None or not self._running:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put(_Stop(future))
        with anyio.CancelScope(shield=True):
            await future
            await anyio.to_thread.run_sync(thread.join)
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None

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
            where = self.root / f"{session.id}.jsonl"
            message = f"cannot persist session {session.id!r} to {where}: {exc}"
            _log.error("%s", message)
            error = PersistenceError(message, id=session.id)
            error.__cause__ = exc
            self._errors[session] = error
            return
        self._written[session] = upto
        session.mark_durable(upto)


def _make_atexit(backend: JsonlPersistence) -> Callable[[], None]:
    ref = weakref.ref(backend)
    return lambda: _atexit_close(ref)
