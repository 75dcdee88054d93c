"""Where tool bodies run, how they may end, and who waits for bodies that outlive their call.

An async body runs in the calling task, driven step by step by :func:`run_async` the way a
task drives a coroutine, so whatever it does cannot unwind the caller, the loop or the kernel:

- **Any ending is an outcome.** A body's ``Exception`` is re-raised in the caller; any other
  ``BaseException`` (``SystemExit`` from argparse, ``KeyboardInterrupt``, ``GeneratorExit``, a
  custom subclass, a ``CancelledError`` the body raised itself) is re-raised as
  :class:`BodyRaised`, an ``Exception``: it cannot stop the event loop nor pose as a
  cancellation. Only cancelling the *caller* (an abort, a timeout, a teardown) cancels a body.
- **Cancellation is prompt and bounded.** Once its call is over (the user cancelled the turn
  or the call, or the tool's timeout passed) a body that ignores the cancellation gets
  ``ctx.tools.cancel_grace`` (default 1 s, never more than the disposal grace); when its agent
  is disposed or the App torn down, ``ctx.tools.disposal_grace`` (default 10 s). A body still
  waiting then is *closed* at its await (``GeneratorExit``, so its ``finally`` blocks run) with
  a warning on the ``agentloop_nb.tools`` logger, and the caller's cancellation proceeds. It
  is closed, not left running: its cancel scopes belong to the caller's task, so it cannot
  outlive its call without corrupting that task.
- **It costs nothing extra.** No task, no event-loop pass: a body that finishes without
  waiting is one call (a task per body cost a third of a zero-latency step).

A sync body cannot be interrupted: on abort or timeout its call returns at once and the body
is *abandoned*, finishing in its thread; its late value or exception is dropped with a line on
the ``agentloop_nb.tools`` logger. Two rules keep such bodies from holding anything up:

- They run in **daemon** threads of a small reusable pool (``run_sync``), never in a pool the
  interpreter joins at exit, so a body that never returns cannot keep the process alive.
- While a body runs for an agent, a :class:`BodyTracker` owned by that agent's scope records
  it; disposing the agent waits for those bodies up to a grace period, then abandons the rest
  with a warning on the ``agentloop_nb.tools`` logger.

The tracker and the grace periods of the running call reach ``run_sync`` and ``run_async``
through a context variable the dispatch phase sets around the body, so tool definitions need no
extra parameter.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import queue
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ..errors import AgentloopError
from ._grace import DEFAULT_CANCEL_GRACE, DEFAULT_DISPOSAL_GRACE

if TYPE_CHECKING:
    from ..signals import AbortSignal

__all__ = [
    "DEFAULT_CANCEL_GRACE",
    "DEFAULT_DISPOSAL_GRACE",
    "TRACKED",
    "BodyAbandoned",
    "BodyRaised",
    "BodySource",
    "BodyTracker",
    "run_async",
    "run_sync",
]

_log = logging.getLogger("agentloop_nb.tools")

# A worker idle this long exits; a busy notebook reuses warm threads.
_IDLE_SECONDS = 10.0


class BodyRaised(AgentloopError):
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


class BodySource(Protocol):
    """Where a running body's tracker and grace periods come from (the tool registry): read
    when they are needed, so a later change applies to bodies already running."""

    disposal_grace: float
    cancel_grace: float

    def tracker(self, agent: Any) -> BodyTracker | None: ...


# (source, agent, tool name): one tuple per call, no closures (it is set around every body)
_Entry = tuple[BodySource, Any, str]

#: The running body's entry ``(source, agent, name)``, set by the dispatch phase around the
#: body: ``run_sync`` calls under it record their thread (labelled ``name``) with the tracker
#: ``source.tracker(agent)`` returns (asked only when a sync body starts), and ``run_async``
#: calls wait for a body that ignores its cancellation ``source.cancel_grace`` seconds when
#: its call is over (abort, timeout; capped at ``source.disposal_grace``) and
#: ``source.disposal_grace`` seconds when its agent is disposed.
TRACKED: contextvars.ContextVar[_Entry | None] = contextvars.ContextVar(
    "agentloop_nb_tool_body", default=None
)


async def run_sync(fn: Callable[[], Any]) -> Any:
    """Run ``fn()`` in a daemon worker thread (with a copy of the caller's context variables)
    and return its value or raise its exception.

    Cancelling the caller abandons the thread: the call raises the cancellation at once and the
    body finishes on its own (tracked, when :data:`TRACKED` has an entry); what it
    finishes with is dropped with an info line on the ``agentloop_nb.tools`` logger. A body
    ending with a ``BaseException`` that is not an ``Exception`` raises :class:`BodyRaised`.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_Outcome] = loop.create_future()
    current = TRACKED.get()
    if current is not None:
        tracker = current[0].tracker(current[1])
        if tracker is not None:
            tracker.add(done, current[2])
    _submit((contextvars.copy_context(), fn, loop, done))
    try:
        # shield: cancelling this await must not resolve ``done``, which tracks the thread itself
        value, exc = await asyncio.shield(done)
    except asyncio.CancelledError:
        if not done.done():  # abandoned: its outcome, when it comes, has nobody to go to
            name = current[2] if current is not None else getattr(fn, "__name__", "?")
            done.add_done_callback(partial(_drop_late, name, loop.time()))
        raise
    if exc is not None:
        raise exc if isinstance(exc, Exception) else BodyRaised(exc)
    return value


def _drop_late(name: str, since: float, done: asyncio.Future[_Outcome]) -> None:
    """Log the outcome of a sync body that finished after its call was over, and drop it."""
    value, exc = done.result()
    late = asyncio.get_running_loop().time() - since
    outcome = "returned a value" if exc is None else f"raised {type(exc).__name__}: {exc}"
    _log.info(
        "tool body %r %s %.3g s after its call was cancelled; the late result is dropped",
        name,
        outcome,
        late,
    )
    del value  # not kept, not shown: it may be large, and nobody asked for it


class BodyAbandoned(AgentloopError):
    """A body that shielded itself from its call's cancellation (abort or timeout) past the
    grace period was closed; its call has no outcome of its own."""


def run_async(
    body: Coroutine[Any, Any, Any],
    *,
    signal: AbortSignal | None = None,
    timeout: float | None = None,
) -> Awaitable[Any]:
    """Run the coroutine ``body`` in the calling task; await the result for its value.

    The body runs as ``await body`` would (its cancel scopes, timeouts and shields belong to the
    caller's task, so they nest in the caller's scopes), under a copy of the caller's context
    variables, and driven step by step so that how it ends can be sorted: its ``Exception`` is
    re-raised; any other ``BaseException`` it ends with (``SystemExit``, ``KeyboardInterrupt``,
    ``GeneratorExit``, a ``CancelledError`` it raised although nobody cancelled the caller) is
    raised as :class:`BodyRaised`. A body that finishes without waiting costs no task and no
    event-loop pass.

    Cancelling the caller cancels the body at its await. Once the call is over for its caller
    (a cancellation reached the body, ``signal`` aborted, or ``timeout`` seconds passed), a body
    still running gets a grace period from the :data:`TRACKED` entry: its cancel grace
    when ``signal`` aborted for any reason but a disposal (``{"kind": "disposed"}``) or the
    timeout passed, its disposal grace otherwise (a disposal, a teardown cancelling the task);
    without an entry, :data:`DEFAULT_CANCEL_GRACE` and :data:`DEFAULT_DISPOSAL_GRACE`. The
    shorter applies once both do. If it ends within it, its value or exception is the outcome
    (as for a direct await; an anyio scope re-delivers its cancellation at the caller's next
    await); if it is still waiting then, it is closed (``GeneratorExit`` at its await, so its
    ``finally`` blocks run) with a warning on the ``agentloop_nb.tools`` logger, and the call
    raises the cancellation it ignored, or :class:`BodyAbandoned` when it shielded itself from
    it (no cancellation ever reached it).
    """
    return _Driven(body, signal, timeout)


class _Driven:
    """The awaitable behind :func:`run_async`: drives a body the way a task drives its
    coroutine (each step under the body's own context), in the task that awaits it.

    Nothing is watched until the body first suspends, so a body that finishes at once costs a
    context copy and one step."""

    __slots__ = (
        "_body",
        "_context",
        "_entry",
        "_forced",
        "_grace",
        "_listening",
        "_signal",
        "_task",
        "_timeout",
        "_unwatch",
    )

    def __init__(
        self, body: Coroutine[Any, Any, Any], signal: AbortSignal | None, timeout: float | None
    ) -> None:
        self._body = body
        self._context = contextvars.copy_context()
        self._signal = signal
        self._timeout = timeout
        self._grace: _Grace | None = None
        # set at the first suspension
        self._unwatch: Sequence[Callable[[], Any]] | None = None
        self._listening: Callable[[Any], None] | None = None  # our callback on the signal

    def __await__(self) -> Generator[Any, Any, Any]:
        body, run = self._body, self._context.run
        send, throw = body.send, body.throw
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    yielded = run(send, value) if error is None else run(throw, error)
                except StopIteration as stop:
                    return stop.value
                except Exception:
                    raise
                except asyncio.CancelledError as exc:
                    if self._grace is not None and self._grace.cancelled is not None:
                        raise  # the cancellation delivered to it
                    raise BodyRaised(exc) from exc
                except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit
                    raise BodyRaised(exc) from exc
                if self._unwatch is None:
                    self._watch()
                value, error = None, None
                try:
                    if self._grace is None:
                        value = yield yielded  # the task waits on what the body waits on
                    else:
                        yield from self._grace.wait(yielded)
                except asyncio.CancelledError as exc:
                    if self._forced:
                        raise self._abandon() from None
                    error = exc
                    if self._is_cancel():
                        self._on_cancel().cancelled = exc
                except _Expired:
                    raise self._abandon() from None
                except GeneratorExit:  # our awaiter is closed: the body goes with it
                    with contextlib.suppress(RuntimeError):  # it awaited while being closed
                        body.close()
                    raise
                except BaseException as exc:  # what the awaited future failed with
                    error = exc
        finally:
            listening = self._listening
            if listening is not None:
                # (dropped too: a bound method of this object kept on it is a reference cycle,
                # left to the cyclic GC once per pooled call)
                self._listening = None
                try:  # noqa: SIM105  (no context manager object: once per pooled call)
                    self._signal._callbacks.remove(listening)  # type: ignore[union-attr]
                except ValueError:  # gone already when the abort ran it
                    pass
            for undo in self._unwatch or ():
                undo()
            if self._grace is not None:
                self._grace.stop()

    def _watch(self) -> None:
        """At the first suspension: start the grace when the signal aborts or the timeout
        passes, even if the body shields itself from the cancellation they cause."""
        self._unwatch = ()  # (a list only when there is something to undo: the timer)
        self._entry = TRACKED.get()  # still in the caller's context here
        self._task = (
            asyncio.current_task() if _TASK_OF is None else _TASK_OF(asyncio.get_running_loop())
        )
        self._forced = False  # the grace ran out while the task awaited the body's future
        signal = self._signal
        if signal is not None:
            if signal.aborted:  # it runs now, as add_callback runs it
                signal.add_callback(self._on_abort)
            else:
                # fast path (benchmarks/README.md "Step and pool (session 8)"): appended and
                # removed directly, as AbortScope does; add_callback builds a closure and a
                # disposer, once per call that suspends (every call of a pool)
                listening = self._listening = self._on_abort
                signal._callbacks.append(listening)
        if self._timeout is not None:
            loop = asyncio.get_running_loop()
            self._unwatch = [loop.call_later(self._timeout, self._begin_grace, False).cancel]

    def _on_abort(self, reason: Any) -> None:
        self._begin_grace(_is_disposal(reason))

    def _on_cancel(self) -> _Grace:
        """A cancellation of the caller reached the body: a teardown's unless the signal says
        otherwise (a tool timeout's anyio scope may land first; its own timer shortens it)."""
        signal = self._signal
        if signal is not None and signal.aborted:
            return self._begin_grace(_is_disposal(signal.reason))
        return self._begin_grace(True)

    def _begin_grace(self, disposal: bool) -> _Grace:
        """Start the grace (disposal grace or cancel grace); once started, a shorter one only
        brings its end forward."""
        entry = self._entry
        disposal_s = entry[0].disposal_grace if entry is not None else DEFAULT_DISPOSAL_GRACE
        if disposal:
            seconds, setting = disposal_s, "disposal_grace"
        else:
            cancel_s = entry[0].cancel_grace if entry is not None else DEFAULT_CANCEL_GRACE
            seconds, setting = min(cancel_s, disposal_s), "cancel_grace"
        grace = self._grace
        if grace is None:
            name = entry[2] if entry is not None else "?"
            grace = self._grace = _Grace(name, seconds, setting, self._expired)
        else:
            grace.limit(seconds, setting)
        return grace

    def _expired(self) -> None:
        """The grace ran out: wake the task if it awaits the body's own future (a proxy
        future of the grace wakes by itself)."""
        grace = self._grace
        assert grace is not None
        if not grace.wake() and self._task is not None:
            self._forced = True
            self._task.cancel()

    def _abandon(self) -> BaseException:
        """Close the body; the exception the call ends with."""
        grace = self._grace
        assert grace is not None
        if self._forced and self._task is not None:
            self._task.uncancel()  # our own wake-up call, not a cancellation of the caller
        grace.abandon(self._body, self._context)
        if grace.cancelled is not None:
            return grace.cancelled
        return BodyAbandoned(
            f"tool body {grace.name!r} ignored its cancellation for the {grace.seconds:g} s "
            f"grace period (ctx.tools.{grace.setting}) and was closed"
        )

    def _is_cancel(self) -> bool:
        """Whether a ``CancelledError`` thrown in cancels the caller (its task has a cancel
        request pending), not just a future the body awaited that somebody else cancelled."""
        task = self._task
        return task is None or task.cancelling() > 0


# asyncio.current_task's own lookup (loop -> task), on Python 3.11 only, where current_task is
# a Python function (asked once per body that suspends: every pooled call); from 3.12 on the
# builtin is used.
_TASK_OF: Callable[[Any], asyncio.Task[Any] | None] | None = (
    asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
    if sys.version_info < (3, 12)
    else None
)


class _Expired(AgentloopError):
    """The grace period of a cancelled body ran out while it was still waiting."""


def _is_disposal(reason: Any) -> bool:
    """Whether an abort reason is a disposal (the driver's ``{"kind": "disposed"}``)."""
    return isinstance(reason, dict) and reason.get("kind") == "disposed"


class _Grace:
    """The bounded wait for a body that keeps running after its call is over. ``setting``
    names the ``ctx.tools`` attribute that set ``seconds`` (for the messages)."""

    __slots__ = (
        "_expire",
        "_start",
        "_timer",
        "_waiter",
        "cancelled",
        "expired",
        "name",
        "seconds",
        "setting",
    )

    def __init__(
        self, name: str, seconds: float, setting: str, on_expiry: Callable[[], None]
    ) -> None:
        self.name = name
        self.seconds = seconds
        self.setting = setting
        self._waiter: asyncio.Future[None] | None = None
        self.cancelled: BaseException | None = None
        self.expired = False

        def expire() -> None:
            if not self.expired:
                self.expired = True
                on_expiry()

        loop = asyncio.get_running_loop()
        self._expire = expire
        self._start = loop.time()
        self._timer = loop.call_at(self._start + seconds, expire)

    def limit(self, seconds: float, setting: str) -> None:
        """End the grace ``seconds`` after it started, if that is sooner than planned."""
        if seconds >= self.seconds or self.expired:
            return
        self.seconds, self.setting = seconds, setting
        self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(self._start + seconds, self._expire)

    def wake(self) -> bool:
        """Resolve the proxy future the task awaits, if it awaits one; whether it did."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            return False
        waiter.set_result(None)
        return True

    def wait(self, yielded: Any) -> Generator[Any, Any, None]:
        """Wait for what the body yielded, but no longer than the grace period: raises
        :class:`_Expired` then (the body is still waiting). A cancellation thrown in cancels
        the awaited future (as a task does) and propagates."""
        if self.expired:
            raise _Expired
        if not asyncio.isfuture(yielded):  # a bare ``yield`` (sleep(0)) or a bad yield
            yield yielded
            if self.expired:
                raise _Expired
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()

        def wake(_: Any) -> None:
            if not waiter.done():
                waiter.set_result(None)

        yielded.add_done_callback(wake)
        try:
            yield from waiter.__await__()  # as ``await waiter`` (the task checks the protocol)
        except BaseException:
            yielded.remove_done_callback(wake)
            yielded.cancel()
            raise
        if self.expired and not yielded.done():
            yielded.remove_done_callback(wake)
            raise _Expired

    def stop(self) -> None:
        self._timer.cancel()

    def abandon(self, body: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        """Close ``body``, still waiting after the grace period, with a warning."""
        _log.warning(
            "abandoning tool body %r: it ignored its cancellation for the %g s grace period "
            "(ctx.tools.%s); it is closed at its await",
            self.name,
            self.seconds,
            self.setting,
        )
        try:
            context.run(body.close)
        except RuntimeError:
            # It awaited while being closed: the part that did is left suspended (the
            # interpreter closes it again when it is collected); nothing more can be done.
            _log.warning("tool body %r ignored GeneratorExit too; dropped", self.name)


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
