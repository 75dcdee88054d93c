"""``WriteBehind``: the write-behind machinery both persistence backends share.

The backend watches each session it writes (``Session.watch_appends``, from ``_open``): the watcher
(``_on_append``) never blocks and keeps nothing of the event: it puts the session itself on a FIFO
queue, once until a worker has taken it (the ``_marked`` set, which the session reads itself before
it calls the watcher: ``watch_appends(..., unless=)``), so a session with events to write has one
wake item queued however many events it logs meanwhile. A worker thread owned by the backend
(started lazily, stopped by ``aclose``) takes the queue in batches and writes each marked session's
events from its own log, from the last one written up to the last one appended (``_store_header``,
``_store_events``), then advances ``session.durable_seq``. Control items (open, flush, close, stop)
ride the same queue, so each runs after everything queued before it: ``session/flush`` puts a
barrier and awaits it, returning once everything appended before it is written, or raising the
session's ``PersistenceError``.

Why the session and not the event: the log is append-only and the worker is its only reader
off the loop, so the events to write are always ``events[written + 1:]``. Queuing each
event's payload kept it alive until the next batch, which made the cyclic GC run more often
on the loop thread (``benchmarks/README.md``, "JSONL hand-off (session 13)").

Why a watcher and not a ``session/event`` listener: the writer needs to know *which session*
grew, once per batch, not each event; an announcement built a payload and ran the bus for
every logged event (about a twentieth of a tool step's instructions with JSONL on,
``benchmarks/README.md``, "The writer watches its sessions (session 14)"). ``session/event``
is unchanged for everyone else, and is no longer observed at all when only persistence
watched it.

A backend whose writes are quick and local (``_writes_inline``: JSONL without fsync) writes at a
flush on the loop thread itself when the worker is not writing (``_write_lock`` is free), and its
watcher does not wake the worker at once: the session waits on the loop side (``_pending``) until
a flush writes it or a timer armed by the first such append (``HAND_OFF_AFTER``) queues it. A
turn flushes twice at its end; two thread hops each (this machine wakes an idle CPU in
50-300 µs) cost more than the writes, and a worker woken mid-turn only contended for the GIL.
An inline write slower than ``SLOW_INLINE`` turns inline writes off for the backend for good.

A failed write is recorded for the session (the error table): every later flush raises the
same error and nothing more is written for it, until it is disposed (and resumed).

Who touches what (the rule that keeps the two threads apart):

- ``_marked`` holds the sessions whose wake item is queued (or pending) and not yet taken: the
  loop thread adds a session (then puts it, or keeps it pending), the worker discards it when
  it takes the item, *before* it reads how long the log is. So an event appended after that
  read finds its session unmarked and queues it again; one appended before it is in what the
  worker writes. The loop thread discards a *pending* session itself after writing it inline
  (it was never queued, and nothing was appended during the write).
- ``_pending``, ``_timer_loop``, ``_closing`` and ``_inline`` are the loop thread's alone.
  While ``aclose`` runs, appends are queued at once, so the stopping worker writes them.
- ``_written`` (last seq written per session) belongs to whoever holds ``_write_lock``: the
  worker, or the loop thread writing inline (``_on_disposed`` clears a session's entries
  itself only while no worker runs and nothing is queued, under ``_start_lock``, which a
  worker needs to restart).
- ``_errors`` is written under ``_write_lock`` and read by both threads, always under
  ``_errors_lock`` (the loop reads it at a flush and a disposal, never per event).
- ``_running`` says whether a worker is draining the queue; it is set under ``_start_lock``
  (the loop thread reads it without the lock when it queues a session: a stale ``False``
  only costs a lock round, a stale ``True`` is caught by the worker re-checking the queue
  before it exits).
- ``session.durable_seq`` / ``header_durable`` are what the worker publishes to the loop
  (``Session.mark_durable``): a single attribute store each, read without a lock.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from signal import SIGINT, default_int_handler
from typing import Any

import anyio
import anyio.to_thread

from .._disposer import Disposer
from ._events import SessionEvent, SessionHeader
from ._persistence import PersistenceError, Subscriber, install_write_behind
from ._session import Session, SessionPayload

__all__ = ["WriteBehind"]

try:
    # The C function: ``signal.getsignal`` maps the handler to an enum, and a handler that is
    # not one (``asyncio.run``'s) costs it a ``ValueError`` built from the handler's repr (its
    # task's): 6 µs a call, twice a turn.
    from _signal import getsignal as _getsignal  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # not CPython
    from signal import getsignal as _getsignal

_log = logging.getLogger("agentloop_nb")
_BATCH = 16384  # queue items folded into one write round
# How long a backend that writes inline keeps a session's new events on the loop side before
# handing them to the worker, unless a flush writes them first (then the worker is never
# woken). Longer than a fast turn (a 200-step turn with a zero-latency model takes ~20 ms),
# short enough that a crash without a flush loses little more than it did.
HAND_OFF_AFTER = 0.05
# An inline write (encoding included) slower than this turns inline writes off for the backend
# for good: the disk is slow, and the loop must not wait on it again.
SLOW_INLINE = 0.02
# A flush with more events than this to write leaves them to the worker: encoding them would
# hold the loop for milliseconds, where the worker gives the GIL back every switch interval.
INLINE_MAX = 4096


def _interrupt_may_land() -> bool:
    """Whether a ``KeyboardInterrupt`` may be raised on this thread now: only the main thread
    runs signal handlers, and only the default one raises at any bytecode (ipykernel installs it
    while a cell executes and ignores SIGINT otherwise; ``asyncio.run``'s first Ctrl-C cancels
    its task instead). An interrupt between a write and its bookkeeping would have the next
    write repeat the written events, so such a flush leaves the write to the worker."""
    return (
        _getsignal(SIGINT) is default_int_handler
        and threading.current_thread() is threading.main_thread()
    )


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # the waiter was cancelled
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class _Control:
    """A non-event queue item, run by the worker after everything queued before it."""

    def run(self, backend: WriteBehind) -> bool:  # True: stop the worker
        raise NotImplementedError


class _Waiter(_Control):
    def __init__(self, future: asyncio.Future[None] | None) -> None:
        self.future = future
        self.loop = future.get_loop() if future is not None else None

    def resolve(self, error: BaseException | None = None) -> None:
        if self.future is None or self.loop is None:
            return
        # A closed loop raises RuntimeError: then nobody is waiting any more. (``try``, not a
        # ``suppress`` object: a flush resolves twice a turn.)
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, error)
        except RuntimeError:
            return


class _Open(_Control):
    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, backend: WriteBehind) -> bool:
        backend._write(self.session)
        return False


class _Flush(_Waiter):
    def __init__(self, session: Session, future: asyncio.Future[None]) -> None:
        super().__init__(future)
        self.session = session

    def run(self, backend: WriteBehind) -> bool:
        backend._write(self.session)
        self.resolve(backend._error_of(self.session))
        return False


class _Close(_Control):
    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, backend: WriteBehind) -> bool:
        backend._forget(self.session)
        return False


class _Stop(_Waiter):
    def run(self, backend: WriteBehind) -> bool:
        self.resolve()
        return True


def _atexit_close(ref: weakref.ref[WriteBehind]) -> None:
    backend = ref()
    if backend is not None:
        backend.close(timeout=10.0)


class WriteBehind:
    """Base of a write-behind backend (see the module docstring).

    A backend implements the storage hooks, run on the worker thread only:
    ``_store_header(header)`` (store a new session's header), ``_store_events(id, events)``
    (append contiguous events) and ``_failure(session, exc)`` (the ``PersistenceError`` that
    ``exc`` becomes, naming where and what to do). It may override ``_begin_round`` (before
    each batch, e.g. to (re)connect), ``_end_worker`` (when the worker thread exits),
    ``_release(session)`` (give back the writer lock after the session's last write) and
    ``_closed()`` (after ``aclose`` drained the queue). Its ``session/created`` listener
    (``_on_created``, the writer-lock checks) ends with ``self._open(session)``.
    """

    _worker_name = "agentloop_nb-writer"
    _label = "session"  # names the writer in the log when it hits a bug

    def __init__(self) -> None:
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running = False
        self._start_lock = threading.Lock()
        # Keyed by session object (ids can be reused after a detach).
        self._written: dict[Session, int] = {}
        self._errors: dict[Session, PersistenceError] = {}
        self._errors_lock = threading.Lock()
        self._atexit: Callable[[], None] | None = None
        self._marked: set[Session] = set()
        # Marked sessions not handed to the worker yet (loop thread only; see ``_on_append``).
        self._pending: dict[Session, None] = {}
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # where the hand-off is armed
        self._closing = False  # ``aclose`` runs: appends go straight to the worker
        self._inline = True  # cleared for good by a slow inline write
        # Held by whoever writes (``_write``): the worker, or the loop thread at a flush.
        self._write_lock = threading.Lock()
        # The sessions this backend watches (loop thread only): unwatched when it is uninstalled.
        self._watched: weakref.WeakSet[Session] = weakref.WeakSet()

    # -- the storage hooks -------------------------------------------------------------------

    def _store_header(self, header: SessionHeader) -> None:
        raise NotImplementedError

    def _store_events(self, id: str, events: Sequence[SessionEvent]) -> None:
        raise NotImplementedError

    def _failure(self, session: Session, exc: Exception) -> PersistenceError:
        raise NotImplementedError

    def _begin_round(self) -> None:
        """Called on the worker thread before each batch."""

    def _end_worker(self) -> None:
        """Called on the worker thread when it stops (after a stop item)."""

    def _release(self, session: Session) -> None:
        """Give back the writer lock ``session`` holds (after its last write)."""

    def _closed(self) -> None:
        """Called by ``aclose`` once the worker has drained the queue and stopped."""

    def _writes_inline(self) -> bool:
        """Whether a flush may write on the event loop's thread when the worker is not writing
        (quick local writes only: a backend whose writes can stall says no, the default)."""
        return False

    # -- the listeners (event loop) ----------------------------------------------------------

    def install(self, ctx: Subscriber) -> Disposer:
        """Subscribe the write-behind listeners on ``ctx`` (``ctx.on(name, handler)``:
        ``session/created``, ``flush``, ``disposed``; each session created from then on is
        watched, see the module docstring); the returned ``Disposer`` unsubscribes them and
        stops watching every session (queued writes still complete)."""
        listening = install_write_behind(
            ctx,
            created=self._on_created,
            flush=self._on_flush,
            disposed=self._on_disposed,
        )

        def undo() -> None:
            listening()
            for session in [*self._watched]:
                session.unwatch_appends(self._on_append)
            self._watched.clear()
            # What waits with nothing left to write is forgotten (a worker handed it would
            # write whatever is appended meanwhile); the rest goes to the worker.
            for session in [*self._pending]:
                if self._all_durable(session):
                    del self._pending[session]
                    self._marked.discard(session)
            self._hand_off()

        return Disposer(undo)

    def _on_created(self, payload: SessionPayload) -> None:
        raise NotImplementedError

    def _open(self, session: Session) -> None:
        """Have the worker write what ``session`` logged so far (its header first if new),
        and watch its appends from now on."""
        # ``unless``: a session already queued is skipped by the append itself (no call)
        session.watch_appends(self._on_append, unless=self._marked)
        self._watched.add(session)
        self._put(_Open(session))

    def _on_append(self, session: Session) -> None:
        """The watcher of each session written: queue it unless it is already queued (the
        session skips the call itself while it is in ``_marked``: see ``_open``). A backend
        that writes inline keeps it on the loop side instead (``_pending``) and arms one
        hand-off per loop: a flush before then writes it on the loop thread, and the worker is
        never woken (see the module docstring)."""
        if session in self._marked:
            return
        self._marked.add(session)
        if self._inline and not self._closing and self._writes_inline():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # an append outside a loop: nothing would run a timer
                pass
            else:
                self._pending[session] = None
                if self._timer_loop is not loop:
                    self._timer_loop = loop
                    loop.call_later(HAND_OFF_AFTER, self._hand_off_later, loop)
                if self._atexit is None:  # an exit before the hand-off still writes it
                    self._register_atexit()
                return
        self._queue.put(session)
        if not self._running:
            self._ensure_worker()

    def _hand_off_later(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer_loop is loop:
            self._timer_loop = None
        self._hand_off()

    def _hand_off(self) -> None:
        """Queue every pending session for the worker (they stay marked until it takes them)."""
        if not self._pending:
            return
        for session in self._pending:
            self._queue.put(session)
        self._pending.clear()
        if not self._running:
            self._ensure_worker()

    def _error_of(self, session: Session) -> PersistenceError | None:
        with self._errors_lock:
            return self._errors.get(session)

    @staticmethod
    def _all_durable(session: Session) -> bool:
        return session.header_durable and session.durable_seq >= len(session.events) - 1

    async def _on_flush(self, payload: SessionPayload) -> None:
        session = payload.session
        error = self._error_of(session)
        if error is not None:
            raise error
        if self._all_durable(session):
            return
        if (
            self._inline
            and len(session.events) - 1 - session.durable_seq <= INLINE_MAX
            and self._writes_inline()
            and not _interrupt_may_land()
            and self._write_lock.acquire(blocking=False)
        ):
            # The worker is not writing: a hop to it and back costs more than the write.
            try:
                started = time.perf_counter()
                self._write_unlocked(session)
                if session in self._pending:  # never handed off: nothing left for the worker
                    del self._pending[session]
                    self._marked.discard(session)
                slow = time.perf_counter() - started > SLOW_INLINE
            finally:
                self._write_lock.release()
            if slow:
                self._inline = False
                self._hand_off()
                _log.info(
                    "agentloop_nb %s writer: a write took over %.0f ms; writes stay on the "
                    "writer thread from now on",
                    self._label,
                    SLOW_INLINE * 1000,
                )
            error = self._error_of(session)
            if error is not None:
                raise error
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._put(_Flush(session, future))
        await future

    def _on_disposed(self, payload: SessionPayload) -> None:
        session = payload.session
        if session in self._pending:  # its last events go to the worker before its close
            self._hand_off()
        self._watched.discard(session)  # detached: the session dropped its watchers itself
        # Nothing left to write (all durable, or writing failed for good): give the lock back
        # now, so a disposal is followed by a free session at once. The worker's close then
        # only forgets the session (its release finds another owner, or none).
        if self._error_of(session) is not None or self._all_durable(session):
            self._release(session)
        with self._start_lock:
            if not self._running and self._queue.empty():
                # No worker and nothing queued (after ``aclose``): nobody else touches the
                # tables, and a worker only (re)starts under this lock.
                self._forget(session)
                return
        self._put(_Close(session))  # after the session's queued writes

    def _forget(self, session: Session) -> None:
        self._marked.discard(session)
        self._written.pop(session, None)
        with self._errors_lock:
            self._errors.pop(session, None)
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
            self._thread = threading.Thread(target=self._run, name=self._worker_name, daemon=True)
            self._thread.start()
            if self._atexit is None:
                self._register_atexit()

    def _register_atexit(self) -> None:
        ref = weakref.ref(self)
        self._atexit = lambda: _atexit_close(ref)
        atexit.register(self._atexit)

    async def aclose(self) -> None:
        """Write everything queued, stop the worker (a later event restarts it) and release
        every session lock this backend holds (sessions still attached are no longer guarded
        against a second writer: closing the backend means this App is done with them)."""
        # Until the worker has stopped, appends are queued at once, so the stopping worker
        # writes them (see ``_run``) before ``aclose`` returns.
        self._closing = True
        try:
            self._hand_off()
            thread = self._thread
            if thread is not None and self._running:
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._queue.put(_Stop(future))
                with anyio.CancelScope(shield=True):
                    await future
                    await anyio.to_thread.run_sync(thread.join)
                if self._atexit is not None:
                    atexit.unregister(self._atexit)
                    self._atexit = None
                self._stopped()
        finally:
            self._closing = False
        self._closed()

    def _stopped(self) -> None:
        """After a stop: what was queued meanwhile starts a worker now."""
        if not self._running and not self._queue.empty():
            self._ensure_worker()

    def close(self, timeout: float | None = None) -> None:
        """Synchronous ``aclose`` (used at interpreter exit): drain and stop the worker."""
        thread = self._thread
        if thread is None or not self._running:
            # No worker: what waits on the loop side is written here (at interpreter exit a
            # new thread may no longer start).
            for session in [*self._pending]:
                self._write(session)
            self._pending.clear()
            return
        self._hand_off()
        self._queue.put(_Stop(None))
        thread.join(timeout)
        self._stopped()

    # -- the worker thread -------------------------------------------------------------------

    def _run(self) -> None:
        queue = self._queue
        get, get_nowait, size = queue.get, queue.get_nowait, queue.qsize
        stop = False
        while not stop:
            items = [get()]
            # This thread is the queue's only consumer: what ``qsize`` counts is there to
            # take (no ``Empty`` raised and caught per round).
            more = min(size(), _BATCH - 1)
            if more:
                items += [get_nowait() for _ in range(more)]
            stop = self._round(items)
        while True:
            # Before ``_running`` drops: a new worker may start right after, and must not
            # share what this one is giving back.
            try:
                self._end_worker()
            except Exception:
                _log.exception("agentloop_nb %s writer failed", self._label)
            with self._start_lock:
                self._running = False
            # Items put while we were stopping (the listener saw ``_running`` still set and
            # started nobody) are written now, without blocking, unless a producer has
            # already started a new worker. A stopping
            # worker never goes back to waiting on the queue: ``aclose`` joins it, and
            # nothing would stop it again.
            if queue.empty():
                return
            with self._start_lock:
                if self._running:
                    return
                self._running = True
            self._round([get_nowait() for _ in range(min(size(), _BATCH))])

    def _round(self, items: list[Any]) -> bool:
        """Write one batch; True when it held a stop."""
        try:
            self._begin_round()
            return self._process(items)
        except Exception:  # a bug must not silently kill durability
            _log.exception("agentloop_nb %s writer failed", self._label)
            return False

    def _process(self, items: list[Any]) -> bool:
        marked = self._marked
        stop = False
        for item in items:
            if type(item) is Session:
                # Unmarked before the log is read: an event appended from now on queues its
                # session again (see the module docstring).
                marked.discard(item)
                self._write(item)
                continue
            try:
                # Items after a stop in the same batch are written too (they were taken off
                # the queue): a stop ends the worker after its batch, it drops nothing.
                stop = item.run(self) or stop
            except Exception as exc:  # never strand a flush waiter behind a bug
                _log.exception("agentloop_nb %s writer failed", self._label)
                if isinstance(item, _Waiter):
                    item.resolve(exc)
        return stop

    def _write(self, session: Session) -> None:
        """Write what ``session`` logged since the last write (its header first if new)."""
        with self._write_lock:
            self._write_unlocked(session)

    def _write_unlocked(self, session: Session) -> None:
        # ``_write_lock`` held: its holder is the only writer of ``_written`` and ``_errors``
        if session in self._errors:
            return
        try:
            last = self._written.get(session)
            if last is None:
                if not session.header_durable:
                    self._store_header(session.header)
                    session.mark_durable(-1)
                last = session.durable_seq
            log = session.events
            upto = len(log) - 1
            if upto <= last:
                return
            self._store_events(session.id, log[last + 1 : upto + 1])
        except Exception as exc:
            error = self._failure(session, exc)
            _log.error("%s", error)
            with self._errors_lock:
                self._errors[session] = error
            return
        self._written[session] = upto
        session.mark_durable(upto)
