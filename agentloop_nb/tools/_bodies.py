"""Where tool bodies run, how they may end, and who waits for bodies that outlive their call.

Every body runs in a task of its own (:func:`run_async`), so whatever it does cannot unwind
the caller, the loop or the kernel:

- **Any ending is an outcome.** A body's ``Exception`` is re-raised in the caller; any other
  ``BaseException`` (``SystemExit`` from argparse, ``KeyboardInterrupt``, ``GeneratorExit``, a
  custom subclass, a ``CancelledError`` the body raised itself) is re-raised as
  :class:`BodyRaised`, an ``Exception``: it cannot stop the event loop nor pose as a
  cancellation. Only cancelling the *caller* (an abort, a timeout, a teardown) cancels a body.
- **Cancellation is bounded.** Cancelling the caller cancels the body's task and waits for it
  up to the grace period (``ctx.tools.disposal_grace``); a body that ignores the cancellation
  longer is *abandoned* with a warning on the ``agentloop_nb.tools`` logger (it keeps running
  until it returns; the module keeps it referenced) and the caller's cancellation proceeds.

A sync body cannot be interrupted: on abort or timeout its call returns at once and the body
is *abandoned*, finishing in its thread. Two rules keep such bodies from holding anything up:

- They run in **daemon** threads of a small reusable pool (``run_sync``), never in a pool the
  interpreter joins at exit, so a body that never returns cannot keep the process alive.
- While a body runs for an agent, a :class:`BodyTracker` owned by that agent's scope records
  it; disposing the agent waits for those bodies up to a grace period, then abandons the rest
  with a warning on the ``agentloop_nb.tools`` logger.

The tracker and the grace period of the running call reach ``run_sync`` and ``run_async``
through a context variable the dispatch phase sets around the body, so tool definitions need no
extra parameter.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final

import anyio

__all__ = [
    "DEFAULT_DISPOSAL_GRACE",
    "BodyRaised",
    "BodyTracker",
    "TrackerFactory",
    "Tracking",
    "run_async",
    "run_sync",
]

_log = logging.getLogger("agentloop_nb.tools")

# A worker idle this long exits; a busy notebook reuses warm threads.
_IDLE_SECONDS = 10.0

#: Seconds a cancelled body (and an agent's disposal) waits before abandoning a body.
DEFAULT_DISPOSAL_GRACE: Final = 10.0


class BodyRaised(Exception):
    """A tool body ended with a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, ``GeneratorExit``, a stray ``CancelledError``, a custom subclass).

    ``original`` is what the body raised (also the ``__cause__``)."""

    def __init__(self, original: BaseException) -> None:
        text = str(original)
        name = type(original).__name__
        super().__init__(f"{name}: {text}" if text else name)
        self.original = original
        self.__cause__ = original


_Outcome = tuple[Any, BaseException | None]
_Job = tuple[
    contextvars.Context, Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[_Outcome]"
]


class BodyTracker:
    """The sync bodies still running for one agent, and the bounded wait for them.

    ``grace`` is read when :meth:`drain` runs, so a later change applies to the next disposal.
    """

    __slots__ = ("_grace", "_pending")

    def __init__(self, grace: Callable[[], float]) -> None:
        self._grace = grace
        self._pending: dict[asyncio.Future[_Outcome], str] = {}

    def add(self, done: asyncio.Future[_Outcome], name: str) -> None:
        """Track ``done`` (resolved when the body's thread finishes) until it resolves."""
        self._pending[done] = name
        done.add_done_callback(self._discard)

    def _discard(self, done: asyncio.Future[_Outcome]) -> None:
        self._pending.pop(done, None)

    @property
    def running(self) -> int:
        return len(self._pending)

    def teardown(self) -> Any:
        """The scope teardown: ``None`` when nothing runs, else the :meth:`drain` awaitable."""
        return self.drain() if self._pending else None

    async def drain(self) -> None:
        """Wait for the tracked bodies up to the grace period; log and abandon the rest.

        Never raises for a body; cancelling it stops the wait (the bodies keep running)."""
        pending = list(self._pending)
        if not pending:
            return
        grace = self._grace()
        _log.debug("waiting up to %g s for %d tool body(ies) to finish", grace, len(pending))
        with anyio.move_on_after(grace):
            await asyncio.wait(pending)
        left = sorted(self._pending.values())
        if left:
            _log.warning(
                "abandoning %d tool body(ies) still running after the %g s grace period: %s",
                len(left),
                grace,
                ", ".join(left),
            )


TrackerFactory = Callable[[], "BodyTracker | None"]
_Entry = tuple[TrackerFactory, str, Callable[[], float]]

_current: contextvars.ContextVar[_Entry | None] = contextvars.ContextVar(
    "agentloop_nb_tool_body", default=None
)


class Tracking:
    """``with Tracking(tracker, name, grace):`` makes ``run_sync`` calls in the block record
    their thread (labelled ``name``) with the tracker ``tracker()`` returns, and ``run_async``
    calls wait ``grace()`` seconds for a cancelled body; ``tracker`` is only called when a sync
    body actually starts. (A class, not a generator: it wraps every call.)"""

    __slots__ = ("_entry", "_token")

    def __init__(self, tracker: TrackerFactory, name: str, grace: Callable[[], float]) -> None:
        self._entry = (tracker, name, grace)

    def __enter__(self) -> None:
        self._token = _current.set(self._entry)

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)


async def run_sync(fn: Callable[[], Any]) -> Any:
    """Run ``fn()`` in a daemon worker thread (with a copy of the caller's context variables)
    and return its value or raise its exception.

    Cancelling the caller abandons the thread: the call raises the cancellation at once and the
    body finishes on its own (tracked, when a :class:`Tracking` block is active). A body ending
    with a ``BaseException`` that is not an ``Exception`` raises :class:`BodyRaised`.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_Outcome] = loop.create_future()
    current = _current.get()
    if current is not None:
        tracker = current[0]()
        if tracker is not None:
            tracker.add(done, current[1])
    _submit((contextvars.copy_context(), fn, loop, done))
    # shield: cancelling this await must not resolve ``done``, which tracks the thread itself
    value, exc = await asyncio.shield(done)
    if exc is not None:
        raise exc if isinstance(exc, Exception) else BodyRaised(exc)
    return value


# Bodies that ignored their cancellation past the grace period, referenced until they end.
_abandoned: set[asyncio.Task[Any]] = set()


async def run_async(body: Coroutine[Any, Any, Any]) -> Any:
    """Run the coroutine ``body`` in a task of its own and return its value.

    Raises the body's ``Exception``, or :class:`BodyRaised` for any other ``BaseException``
    it ends with (a ``CancelledError`` included, unless this call cancelled it). Cancelling the
    caller cancels the body (through an anyio cancel scope, so the body's shielded sections are
    honoured) and waits for it up to the grace period of the active :class:`Tracking` block
    (else :data:`DEFAULT_DISPOSAL_GRACE`): a body that still ends with a value or an exception
    keeps that outcome (the call returns or raises it, as if the body had been awaited
    directly); a body still running then is abandoned with a warning and the cancellation
    proceeds.
    """
    scope = anyio.CancelScope()
    task = asyncio.get_running_loop().create_task(_guarded(body, scope))
    try:
        outcome = await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            scope.cancel()
            await _bounded_wait(task)
        if not task.done() or task.result() is None:
            raise
        # The body ended with an outcome although cancelled (it finished in the loop iteration
        # that cancelled us, or it shielded its work): keep it, as an await in this task would
        # have; an anyio scope re-delivers its cancellation at the caller's next await.
        outcome = task.result()
    assert outcome is not None, "only run_async cancels the body's scope, and then re-raises"
    value, exc = outcome
    if exc is not None:
        raise exc
    return value


async def _guarded(body: Coroutine[Any, Any, Any], scope: anyio.CancelScope) -> _Outcome | None:
    """``body``'s outcome, or ``None`` when ``scope`` (cancelled by :func:`run_async`) caught
    the body's cancellation. Nothing the body raises escapes the task."""
    try:
        with scope:
            return await body, None
        return None
    except Exception as exc:
        return None, exc
    except BaseException as exc:  # SystemExit, a CancelledError of its own & co.
        return None, BodyRaised(exc)


async def _bounded_wait(task: asyncio.Task[Any]) -> None:
    """Wait for the cancelled ``task`` up to the grace period, shielded from the caller's own
    cancellation; abandon it (logged, kept referenced) if it is still running then."""
    current = _current.get()
    grace = current[2]() if current is not None else DEFAULT_DISPOSAL_GRACE
    name = current[1] if current is not None else "?"
    try:
        with anyio.CancelScope(shield=True):
            await asyncio.wait((task,), timeout=grace)
    finally:
        if not task.done():
            _log.warning(
                "abandoning tool body %r: it ignored its cancellation for the %g s grace period "
                "(ctx.tools.disposal_grace) and keeps running until it returns",
                name,
                grace,
            )
            _abandoned.add(task)
            task.add_done_callback(_abandoned.discard)


class _Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="agentloop_nb tool body", daemon=True)
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with _lock:
                    if self in _idle:  # nobody picked this worker meanwhile: retire
                        _idle.remove(self)
                        return
                continue  # picked just now: its job is on the way
            _run_job(job)
            del job  # drop references to the body's values before idling
            with _lock:
                _idle.append(self)


def _run_job(job: _Job) -> None:
    context, fn, loop, done = job
    outcome: _Outcome
    try:
        outcome = (context.run(fn), None)
    except BaseException as exc:  # re-raised in the awaiting task, like a direct call
        outcome = (None, exc)
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(_resolve, done, outcome)


def _resolve(done: asyncio.Future[_Outcome], outcome: _Outcome) -> None:
    if not done.done():
        done.set_result(outcome)


_lock = threading.Lock()
_idle: list[_Worker] = []


def _submit(job: _Job) -> None:
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        worker.start()
    worker.jobs.put(job)
