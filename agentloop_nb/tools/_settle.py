"""Phase 3 of a call, settling: announce the outcome, then post-process and publish it.

- :func:`announce_settled` emits ``tools/settled`` as soon as a call's outcome is known (its
  body returned, or admission refused it), so views can show it done while earlier calls run.
- :func:`settle` runs in model order: the ``tools/post-execute`` waterfall (``Accept`` /
  ``Block``), then the definition's ``finalize_content``, then emits ``tools/result``.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from ..context import EVERY_NAME, Lazy, listened
from ..errors import InvalidTypeError
from ._decisions import (
    BLOCKED,
    TOOL_ERROR,
    PostExecutePayload,
    ToolExecution,
    ToolResult,
    ToolResultPayload,
    ToolSettledPayload,
    error_result,
)
from ._hooks import ACCEPT, POST_EXECUTE, RESULT, SETTLED, accept
from ._verdicts import Accept, Block

__all__ = ["announce_settled", "apply_post_decision", "settle", "settle_now"]

_log = logging.getLogger("agentloop_nb.tools")


def announce_settled(execution: ToolExecution, result: ToolResult) -> None:
    """Emit ``tools/settled{execution, result}`` (observe only; listener errors are contained)."""
    ctx = execution.ctx
    # fast path (benchmarks/bench_ab.py, unobserved hooks): not even the emit's call
    if SETTLED in listened(ctx):
        ctx.emit(SETTLED, Lazy(ToolSettledPayload, execution, result))


def settle_now(execution: ToolExecution, result: ToolResult) -> ToolResult | None:
    """:func:`settle` when it has nothing to await (no ``tools/post-execute`` listener, no
    ``finalize_content`` to run): ``tools/result`` is emitted and the result returned as it
    is; ``None`` when it has (nothing was done: await :func:`settle`). The tool pool settles
    each call with it (a coroutine fewer per call)."""
    ctx = execution.ctx
    names = getattr(ctx, "listened", EVERY_NAME)  # (``listened`` inlined: a frame a call)
    if POST_EXECUTE in names:
        return None
    tool = execution.tool
    if tool is not None and tool.finalize_content is not None and not result.is_error:
        return None
    if RESULT in names:
        ctx.emit(RESULT, Lazy(ToolResultPayload, execution, result))
    return result


async def settle(execution: ToolExecution, result: ToolResult) -> ToolResult:
    """Post-process ``result`` and publish it; returns the final result.

    Runs the ``tools/post-execute`` waterfall (default ``Accept()``) and applies its decision,
    then ``finalize_content`` (successful results only; its failure is a ``TOOL_ERROR``
    result), then emits ``tools/result``. Listener exceptions propagate; a listener answering
    anything but ``Accept``/``Block`` raises ``TypeError``.
    """
    ctx = execution.ctx
    names = listened(ctx)
    # fast path (benchmarks/bench_ab.py, unobserved hooks): Accept(), undispatched
    if POST_EXECUTE in names:
        # No signal: post-execute listeners see every result, aborted calls' included.
        decision = await ctx.waterfall(
            POST_EXECUTE, Lazy(PostExecutePayload, execution, result), accept
        )
        if decision is not ACCEPT:
            result = apply_post_decision(result, decision)
    finalize = execution.tool.finalize_content if execution.tool is not None else None
    if finalize is not None and not result.is_error:
        result = await _finalize(execution, finalize, result)
    if RESULT in names:
        ctx.emit(RESULT, Lazy(ToolResultPayload, execution, result))
    return result


def apply_post_decision(result: ToolResult, decision: Any) -> ToolResult:
    """Apply a ``tools/post-execute`` decision. Raises ``TypeError`` for anything but
    ``Accept``/``Block`` (a plugin bug, which ends the turn)."""
    if isinstance(decision, Accept):
        if decision.content is None and not decision.additional_contexts:
            return result
        update: dict[str, Any] = {}
        if decision.content is not None:
            update["content"] = decision.content
        if decision.additional_contexts:
            update["additional_contexts"] = result.additional_contexts + tuple(
                decision.additional_contexts
            )
        return result.model_copy(update=update)
    if isinstance(decision, Block):
        return error_result(BLOCKED, decision.feedback, call_id=result.call_id)
    raise InvalidTypeError(
        f"a tools/post-execute listener returned {decision!r}; expected Accept(...) or Block(...)"
    )


async def _finalize(execution: ToolExecution, finalize: Any, result: ToolResult) -> ToolResult:
    """``result`` with the content ``finalize(result)`` returns; a ``TOOL_ERROR`` result
    (keeping the additional contexts) when it raises or returns anything but a ``str``."""
    try:
        content = finalize(result)
        if inspect.isawaitable(content):
            content = await content
        if not isinstance(content, str):
            raise TypeError(f"finalize_content returned {type(content).__name__}, not str")
    except Exception as exc:
        _log.debug("finalize_content of tool %r failed", execution.name, exc_info=exc)
        failed = error_result(
            TOOL_ERROR,
            f"tool {execution.name!r} failed to finalize its content: {type(exc).__name__}: {exc}",
            call_id=execution.call_id,
        )
        if result.additional_contexts:
            failed = failed.model_copy(update={"additional_contexts": result.additional_contexts})
        return failed
    return result.model_copy(update={"content": content})
