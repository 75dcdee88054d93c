"""Phase 2 of a call, dispatch: the ``tools/execute`` waterfall around the body.

The waterfall's default runs the body under the tool's ``timeout`` and the execution's abort
signal. An ``async`` body is awaited on the loop and cancelled (through an anyio cancel scope)
on abort or timeout; a sync body runs in a daemon worker thread, which cannot be interrupted:
its call returns at once and the body is tracked until it finishes (see ``_bodies``). Tool
problems become error results; only listener failures and cancellation from outside raise.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from ..signals import AbortError
from ._admit import aborted
from ._bodies import TrackerFactory, Tracking
from ._decisions import TOOL_ERROR, TOOL_TIMEOUT, ToolExecution, ToolResult, error_result
from ._define import call_execute, to_result
from ._hooks import EXECUTE, observed

__all__ = ["dispatch", "run_body"]

_log = logging.getLogger("agentloop_nb.tools")


async def dispatch(execution: ToolExecution, tracker: TrackerFactory) -> ToolResult:
    """Run the ``tools/execute`` waterfall (default: :func:`run_body`) for an admitted call.

    ``tracker()`` gives the tracker a sync body registers with when it starts. Raises
    ``TypeError`` if a listener answers something other than a ``ToolResult``; listener
    exceptions propagate. The result is stamped with the execution's ``call_id``.
    """
    ctx = execution.ctx
    if not observed(ctx, EXECUTE):
        return await run_body(execution, tracker)  # the waterfall's default, called directly

    async def body() -> ToolResult:
        return await run_body(execution, tracker)

    result = await ctx.waterfall(EXECUTE, execution, body)
    if not isinstance(result, ToolResult):
        raise TypeError(f"a tools/execute listener returned {result!r}; expected a ToolResult")
    if result.call_id != execution.call_id:
        result = result.model_copy(update={"call_id": execution.call_id})
    return result


async def run_body(execution: ToolExecution, tracker: TrackerFactory) -> ToolResult:
    """Run the tool body under its ``timeout`` and the execution's abort signal.

    An abort (before or during the body) gives ``ABORTED``; exceeding the timeout gives
    ``TOOL_TIMEOUT``; an exception from the body (or an unserialisable return value) gives
    ``TOOL_ERROR`` naming the exception type and message.
    """
    tool = execution.tool
    assert tool is not None, "run_body needs a resolved tool"
    signal = execution.signal
    if signal.aborted:
        return aborted(execution, "before the tool ran")
    args = execution.args if execution.args is not None else {}
    value: Any = None
    timed_out = False
    with anyio.CancelScope() as abort_scope, Tracking(tracker, execution.name):
        remove = signal.add_callback(lambda _reason: abort_scope.cancel())
        try:
            if tool.timeout is None:
                value = await call_execute(tool, args, execution)
            else:
                with anyio.move_on_after(tool.timeout) as deadline:
                    value = await call_execute(tool, args, execution)
                timed_out = deadline.cancelled_caught
        except AbortError:
            return aborted(execution, "while running")
        except Exception as exc:
            # A body may turn the cancellation into its own exception; the abort still wins.
            if abort_scope.cancel_called:
                return aborted(execution, "while running")
            return _body_error(execution, exc)
        finally:
            remove()
    if abort_scope.cancelled_caught:
        return aborted(execution, "while running")
    if timed_out:
        return error_result(
            TOOL_TIMEOUT,
            f"tool {tool.name!r} timed out after {tool.timeout:g} s",
            call_id=execution.call_id,
        )
    try:
        return to_result(value, execution.call_id)
    except TypeError as exc:
        return _body_error(execution, exc)


def _body_error(execution: ToolExecution, exc: Exception) -> ToolResult:
    _log.debug("tool %r raised", execution.name, exc_info=exc)
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return error_result(
        TOOL_ERROR, f"tool {execution.name!r} failed: {text}", call_id=execution.call_id
    )
