"""Phase 2 of a call, dispatch: the ``tools/execute`` waterfall around the body.

The waterfall's default runs the body under the tool's ``timeout`` and the execution's abort
signal (see ``_bodies``): an ``async`` body runs in the calling task and is cancelled on abort
or timeout (and closed after ``ctx.tools.cancel_grace`` if it ignores that, so a cancelled
turn ends promptly; ``ctx.tools.disposal_grace`` on disposal); a sync body runs in a
daemon worker thread, which cannot be interrupted: its call returns at once and the body is
tracked until it finishes. Every way a body can end is an outcome: tool problems (any exception, any
other ``BaseException`` the body raises, a result over the serialisation caps) become error
results; only listener failures and cancellation from outside raise.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable
from types import TracebackType
from typing import Any, Literal

import anyio

from ..context import EVERY_NAME, Lazy
from ..errors import InvalidTypeError
from ..signals import AbortError, AbortScope, abort_outcome, cancel_scope
from ._admit import aborted
from ._bodies import TRACKED, BodyAbandoned, BodyRaised, BodySource
from ._decisions import (
    CALL_CANCELLED,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    ToolExecution,
    ToolResult,
    ToolSettledPayload,
    drop_admitted,
    error_result,
    hand_scope,
    text_result,
)
from ._define import Tool, call_execute
from ._hooks import EXECUTE, SETTLED
from ._results import ResultRejected, to_result

__all__ = ["WorkerScope", "dispatch", "dispatch_now", "run_body"]

_log = logging.getLogger("agentloop_nb.tools")


async def dispatch(execution: ToolExecution, source: BodySource) -> ToolResult:
    """Run the ``tools/execute`` waterfall (default: :func:`run_body`) for an admitted call,
    then emit ``tools/settled`` with the result.

    ``source`` (the tool registry) gives the tracker a sync body registers with when it starts
    (``source.tracker(agent)``) and the seconds an async body may take to end when its agent is
    disposed (``source.disposal_grace``) or its call is cancelled or times out
    (``source.cancel_grace``); see ``_bodies``. ``tools/execute`` listeners run under the
    execution's signal: an abort while they run gives ``ABORTED`` (``CANCELLED``, whatever the
    body returned, when the user cancelled this call alone). Raises ``TypeError`` if a
    listener answers something other than a ``ToolResult``; listener exceptions propagate.
    The result is stamped with the execution's ``call_id``.
    """
    ctx = execution.ctx
    scope = execution._scope
    if scope is not None:  # a pool worker's, for this one body: taken once
        execution._scope = None
    result: Any
    # (the live view: a listener added meanwhile still counts below; ``listened`` inlined)
    names = getattr(ctx, "listened", EVERY_NAME)
    if EXECUTE not in names:
        # fast path (benchmarks/bench_ab.py, unobserved hooks): the body itself, with no
        # waterfall frame between it and the caller (nor a scope: a worker's can serve)
        if execution.signal.aborted:
            result = aborted(execution, "while running")
        else:
            result = await run_body(execution, source, scope)
    else:
        # The body runs inside the waterfall's own scope: it gets a scope of its own.
        drop_admitted(execution)  # a listener may change the arguments: validate again

        def body() -> Any:
            return run_body(execution, source)

        try:
            result = await ctx.waterfall(EXECUTE, execution, body, signal=execution.signal)
        except AbortError:
            if not execution.signal.aborted:  # a listener's own AbortError: a plugin failure
                raise
            result = aborted(execution, "while running")
        if not isinstance(result, ToolResult):
            raise InvalidTypeError(
                f"a tools/execute listener returned {result!r}; expected a ToolResult"
            )
    return _dispatched(execution, result, names)


def dispatch_now(
    execution: ToolExecution, source: BodySource, scope: WorkerScope | None
) -> Awaitable[ToolResult]:
    """:func:`dispatch` for a resolved tool, without ``dispatch``'s coroutine on the straight
    path (no ``tools/execute`` listener, the signal not aborted): there it is the body's own
    coroutine (``run_body``), which ends as ``dispatch`` would (one frame fewer at every step
    of a body); otherwise ``dispatch`` as ever. The body runs in ``scope`` (a pool worker's,
    see :class:`WorkerScope`) or, ``None``, in a scope of its own (a call the step runs
    alone)."""
    names = getattr(execution.ctx, "listened", EVERY_NAME)  # (``listened`` inlined)
    if EXECUTE in names or execution.signal.aborted:
        hand_scope(execution, scope)  # dispatch takes it for the body, or drops it
        return dispatch(execution, source)
    return run_body(execution, source, scope, names)


def _dispatched(execution: ToolExecution, result: ToolResult, names: Any) -> ToolResult:
    """How the dispatch phase ends, once the body (or the waterfall) gave ``result``: the
    user's cancellation of this call wins, the result is stamped with the call's id, and
    ``tools/settled`` is emitted when listened (``names``: the live listened view)."""
    if execution.signal.reason == CALL_CANCELLED:
        # The user cancelled this call: whatever the body made of it, the model is told so.
        result = aborted(execution, "while running")
    elif result.call_id != execution.call_id:
        result = result.model_copy(update={"call_id": execution.call_id})
    if SETTLED in names:  # announce_settled, without its frame and second lookup
        execution.ctx.emit(SETTLED, Lazy(ToolSettledPayload, execution, result))
    return result


async def run_body(
    execution: ToolExecution,
    source: BodySource | None,
    scope: WorkerScope | None = None,
    names: Any = None,
) -> ToolResult:
    """Run the tool body under its ``timeout`` and the execution's abort signal.

    ``source`` is where a body that outlives its call finds its tracker and grace periods
    (see :func:`dispatch`; ``None``: the defaults, untracked). The body runs in an
    ``AbortScope`` of its own, or in ``scope`` (a pool worker's, whose current anyio scope it
    must be; see :class:`WorkerScope`), which behaves the same. An abort (before or during the
    body, or an error the body raises after it) gives ``ABORTED``; exceeding the timeout gives
    ``TOOL_TIMEOUT``; any other ending of the body (an exception, ``SystemExit``,
    ``KeyboardInterrupt``, a ``CancelledError`` it raised itself, ...) or a return value that
    cannot be serialised within the caps gives ``TOOL_ERROR`` naming what happened.

    With ``names`` (the context's live listened view) the result is also ended as the
    dispatch phase ends it (see :func:`dispatch_now`).
    """
    tool = execution.tool
    assert isinstance(tool, Tool), "run_body needs a resolved tool"
    signal = execution.signal
    result: ToolResult
    if signal.aborted:
        result = aborted(execution, "before the tool ran")
        return result if names is None else _dispatched(execution, result, names)
    args = execution.args if execution.args is not None else {}
    value: Any = None
    timed_out = False
    body_scope: WorkerScope | AbortScope
    if scope is None:
        body_scope = AbortScope(signal, strict=False)
    else:
        scope.signal = signal
        body_scope = scope
    # the body's ``TRACKED`` entry (its tracker and grace periods), one tuple a call
    tracked = TRACKED.set((source, execution.agent, execution.name) if source is not None else None)
    try:
        try:
            with body_scope:
                if tool.timeout is None:
                    value = await call_execute(tool, args, execution)
                else:
                    with anyio.move_on_after(tool.timeout) as deadline:
                        value = await call_execute(tool, args, execution)
                    timed_out = deadline.cancelled_caught
        finally:
            TRACKED.reset(tracked)
    except AbortError:  # aborted while running (an error raised after the abort included)
        result = aborted(execution, "while running")
    except BodyAbandoned:  # it shielded itself past its timeout (an abort is an AbortError)
        result = _timed_out(execution, tool)
    except Exception as exc:
        result = _body_error(execution, exc)
    else:
        call_id = execution.call_id
        if timed_out:
            result = _timed_out(execution, tool)
        elif type(value) is str and type(call_id) is str:
            # fast path (benchmarks/README.md "Pool (session 11)"): what to_result makes of it
            result = text_result(value, call_id)
        else:
            try:
                result = to_result(value, call_id)
            except ResultRejected as exc:
                result = error_result(
                    TOOL_ERROR, f"tool {execution.name!r} failed: {exc}", call_id=call_id
                )
    return result if names is None else _dispatched(execution, result, names)


def _timed_out(execution: ToolExecution, tool: Tool) -> ToolResult:
    return error_result(
        TOOL_TIMEOUT,
        f"tool {tool.name!r} timed out after {tool.timeout:g} s",
        call_id=execution.call_id,
    )


def _body_error(execution: ToolExecution, exc: Exception) -> ToolResult:
    _log.debug("tool %r raised", execution.name, exc_info=exc)
    if isinstance(exc, BodyRaised):
        text = str(exc)  # already "Type: message"
    else:
        message = str(exc)
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return error_result(
        TOOL_ERROR, f"tool {execution.name!r} failed: {text}", call_id=execution.call_id
    )


class WorkerScope:
    """The cancel scope of the bodies one task runs one after another (a pool worker's, or
    a turn's lone calls: ``loop._scheduler.open_body_scope``), in place of an
    :class:`AbortScope` per body (an anyio scope made, entered and left per call: the largest
    single piece of a pooled call's own work; benchmarks/README.md "Pool (session 11)").

    The worker enters one anyio cancel scope when it starts (:meth:`open`; a scope not opened
    enters it when its first body starts: a turn's, which may run none) and leaves it when it
    ends (:meth:`close`). A body run in it (``scope.signal = signal``, then ``with scope:``
    around the body, which must start and end with this scope the task's current one) is
    cancelled exactly as in ``AbortScope(signal, strict=False)``: the scope's callback is on
    ``signal`` while the body runs, so an abort cancels the scope, level-triggered like any
    anyio scope (every await of the body is cancelled until it ends; its shields and nested
    scopes are honoured); at the body's end a cancelled scope is left, catching its own
    cancellation, and a fresh one is entered for the worker's next call. The outcome is the
    same as the per-body scope's: ``AbortError`` when the scope caught its cancellation or the
    body raised an ``Exception`` after the abort; the body's own outcome otherwise. Nothing
    outside a body can cancel it (its callback is on no signal then).
    """

    __slots__ = ("_cancel", "_cancelled", "_scope", "signal")

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None
        self._cancelled = False
        self.signal: Any = None  # the running body's signal
        # one bound method, appended to and removed from each body's signal
        self._cancel = self._on_abort

    def open(self) -> None:
        """Enter a fresh anyio cancel scope in the calling task."""
        scope = cancel_scope()
        scope.__enter__()
        self._scope = scope

    def close(self) -> None:
        """Leave the scope (from the task that opened it, with whatever is propagating)."""
        scope = self._scope
        if scope is not None:
            self._scope = None
            scope.__exit__(*sys.exc_info())

    def _on_abort(self, _reason: Any) -> None:
        self._cancelled = True
        scope = self._scope
        if scope is not None:
            scope.cancel()

    def __enter__(self) -> None:
        signal = self.signal
        if signal.aborted:
            raise AbortError(signal.reason)
        if self._scope is None:  # a turn's body scope: entered at its first body
            self.open()
        signal._callbacks.append(self._cancel)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        signal = self.signal
        self.signal = None
        try:  # noqa: SIM105  (no context manager object: runs once per pooled call)
            signal._callbacks.remove(self._cancel)
        except ValueError:  # gone already when the abort ran it
            pass
        if self._cancelled:
            # Cancelled while the body ran (level-triggered until here): leave this scope as
            # the body's own scope would be left, and give the worker a fresh one.
            self._cancelled = False
            cancel = self._scope
            assert cancel is not None
            try:
                cancel.__exit__(exc_type, exc, tb)
            finally:
                self.open()
            if cancel.cancelled_caught:
                raise AbortError(signal.reason) from None
        if signal.aborted:  # as AbortScope(strict=False) decides once its scope is left
            return abort_outcome(signal, exc, strict=False)
        return False
