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
from collections.abc import Callable
from typing import Any

import anyio

from ..context import listened
from ..errors import InvalidTypeError
from ..signals import AbortError, AbortScope
from ._admit import aborted
from ._bodies import (
    DEFAULT_CANCEL_GRACE,
    DEFAULT_DISPOSAL_GRACE,
    BodyAbandoned,
    BodyRaised,
    TrackerFactory,
    Tracking,
)
from ._decisions import (
    CALL_CANCELLED,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    ToolExecution,
    ToolResult,
    drop_admitted,
    error_result,
)
from ._define import Tool, call_execute
from ._hooks import EXECUTE
from ._results import ResultRejected, to_result

__all__ = ["dispatch", "run_body"]

_log = logging.getLogger("agentloop_nb.tools")


async def dispatch(
    execution: ToolExecution,
    tracker: TrackerFactory,
    grace: Callable[[], float] = lambda: DEFAULT_DISPOSAL_GRACE,
    cancel_grace: Callable[[], float] = lambda: DEFAULT_CANCEL_GRACE,
) -> ToolResult:
    """Run the ``tools/execute`` waterfall (default: :func:`run_body`) for an admitted call.

    ``tracker()`` gives the tracker a sync body registers with when it starts; ``grace()`` the
    seconds an async body may take to end when its agent is disposed, ``cancel_grace()`` when
    its call is cancelled or times out (see ``_bodies``). ``tools/execute`` listeners run under the
    execution's signal: an abort while they run gives ``ABORTED`` (``CANCELLED``, whatever the
    body returned, when the user cancelled this call alone). Raises ``TypeError`` if a
    listener answers something other than a ``ToolResult``; listener exceptions propagate.
    The result is stamped with the execution's ``call_id``.
    """
    ctx = execution.ctx
    if EXECUTE not in listened(ctx):
        # fast path (benchmarks/bench_ab.py, unobserved hooks): the body itself, with no
        # waterfall frame between it and the caller
        if execution.signal.aborted:
            return aborted(execution, "while running")
        result = await run_body(execution, tracker, grace, cancel_grace)
    else:
        drop_admitted(execution)  # a listener may change the arguments: validate again

        def body() -> Any:
            return run_body(execution, tracker, grace, cancel_grace)

        try:
            result = await ctx.waterfall(EXECUTE, execution, body, signal=execution.signal)
        except AbortError:
            if not execution.signal.aborted:  # a listener's own AbortError: a plugin failure
                raise
            return aborted(execution, "while running")
    if not isinstance(result, ToolResult):
        raise InvalidTypeError(
            f"a tools/execute listener returned {result!r}; expected a ToolResult"
        )
    if execution.signal.reason == CALL_CANCELLED:
        # The user cancelled this call: whatever the body made of it, the model is told so.
        return aborted(execution, "while running")
    if result.call_id != execution.call_id:
        result = result.model_copy(update={"call_id": execution.call_id})
    return result


async def run_body(
    execution: ToolExecution,
    tracker: TrackerFactory,
    grace: Callable[[], float] = lambda: DEFAULT_DISPOSAL_GRACE,
    cancel_grace: Callable[[], float] = lambda: DEFAULT_CANCEL_GRACE,
) -> ToolResult:
    """Run the tool body under its ``timeout`` and the execution's abort signal.

    An abort (before or during the body, or an error the body raises after it) gives
    ``ABORTED``; exceeding the timeout gives ``TOOL_TIMEOUT``; any other ending of the body
    (an exception, ``SystemExit``, ``KeyboardInterrupt``, a ``CancelledError`` it raised
    itself, ...) or a return value that cannot be serialised within the caps gives
    ``TOOL_ERROR`` naming what happened.
    """
    tool = execution.tool
    assert isinstance(tool, Tool), "run_body needs a resolved tool"
    signal = execution.signal
    if signal.aborted:
        return aborted(execution, "before the tool ran")
    args = execution.args if execution.args is not None else {}
    value: Any = None
    timed_out = False
    try:
        with (
            Tracking(tracker, execution.name, grace, cancel_grace),
            AbortScope(signal, strict=False),
        ):
            if tool.timeout is None:
                value = await call_execute(tool, args, execution)
            else:
                with anyio.move_on_after(tool.timeout) as deadline:
                    value = await call_execute(tool, args, execution)
                timed_out = deadline.cancelled_caught
    except AbortError:  # aborted while running (an error raised after the abort included)
        return aborted(execution, "while running")
    except BodyAbandoned:  # it shielded itself past its timeout (an abort is an AbortError)
        timed_out = True
    except Exception as exc:
        return _body_error(execution, exc)
    if timed_out:
        return error_result(
            TOOL_TIMEOUT,
            f"tool {tool.name!r} timed out after {tool.timeout:g} s",
            call_id=execution.call_id,
        )
    try:
        return to_result(value, execution.call_id)
    except ResultRejected as exc:
        return error_result(
            TOOL_ERROR, f"tool {execution.name!r} failed: {exc}", call_id=execution.call_id
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
