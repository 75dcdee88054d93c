"""The pieces of the per-call pipeline that do not depend on the registry.

``ToolRuntime`` (``_runtime.py``) strings them together around the hooks. Everything here turns
tool problems into error results; only ``BaseException``s that are not ours (task
cancellation from outside, ``KeyboardInterrupt``) propagate.
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

import anyio

from ..signals import AbortError, AbortSignal
from ._decisions import (
    ABORTED,
    BLOCKED,
    DENIED,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    Accept,
    Allow,
    Block,
    Deny,
    ToolExecution,
    ToolResult,
    error_result,
)
from ._define import call_execute, to_result

__all__ = [
    "apply_post_decision",
    "ask_approval",
    "deny_result",
    "guard_verdict",
    "parse_arguments",
    "run_body",
]

_log = logging.getLogger("agentloop_nb.tools")


def parse_arguments(arguments: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(args, None)`` for a JSON object (an empty/blank string counts as ``{}``), else
    ``(None, problem)``."""
    if not arguments or arguments.isspace():
        return {}, None
    if arguments == "{}":  # what models send for a tool without parameters: skip the parser
        return {}, None
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        detail = (
            f"{exc.msg} at position {exc.pos}" if isinstance(exc, json.JSONDecodeError) else exc
        )
        return None, f"arguments are not valid JSON ({detail})"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _aborted(execution: ToolExecution, when: str) -> ToolResult:
    reason = execution.signal.reason
    suffix = f" (reason: {reason})" if reason is not None else ""
    return error_result(ABORTED, f"tool call aborted {when}{suffix}", call_id=execution.call_id)


async def run_body(execution: ToolExecution) -> ToolResult:
    """Run the tool body under its ``timeout`` and the execution's abort signal.

    An abort (before or during the body) gives ``ABORTED``; exceeding the timeout gives
    ``TOOL_TIMEOUT``; an exception from the body (or an unserialisable return value) gives
    ``TOOL_ERROR`` naming the exception type and message. An async body is cancelled through
    an anyio cancel scope; a sync body is abandoned in its worker thread.
    """
    tool = execution.tool
    assert tool is not None, "run_body needs a resolved tool"
    signal = execution.signal
    if signal.aborted:
        return _aborted(execution, "before the tool ran")
    args = execution.args if execution.args is not None else {}
    value: Any = None
    timed_out = False
    with anyio.CancelScope() as abort_scope:
        remove = signal.add_callback(lambda _reason: abort_scope.cancel())
        try:
            if tool.timeout is None:
                value = await call_execute(tool, args, execution)
            else:
                with anyio.move_on_after(tool.timeout) as deadline:
                    value = await call_execute(tool, args, execution)
                timed_out = deadline.cancelled_caught
        except AbortError:
            return _aborted(execution, "while running")
        except Exception as exc:
            # A body may turn the cancellation into its own exception; the abort still wins.
            if abort_scope.cancel_called:
                return _aborted(execution, "while running")
            return _body_error(execution, exc)
        finally:
            remove()
    if abort_scope.cancelled_caught:
        return _aborted(execution, "while running")
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


async def ask_approval(
    approval: Any, execution: ToolExecution, reason: str | None
) -> ToolResult | None:
    """Ask ``approval.request(execution, reason)``; ``None`` (go) only on an exact ``True``.

    A missing service, a raising one or a ``False`` answer is a ``DENIED`` result (a ``Deny``
    answer is one quoting its reason); an abort while waiting is an ``ABORTED`` result.
    """
    asked = f" ({reason})" if reason else ""
    if approval is None or not callable(getattr(approval, "request", None)):
        return _denied(
            execution,
            f"approval required{asked} but no one could approve it (no approval service)",
        )
    signal: AbortSignal = execution.signal
    if signal.aborted:
        return _aborted(execution, "while waiting for approval")
    answer: Any = None
    with anyio.CancelScope() as scope:
        remove = signal.add_callback(lambda _reason: scope.cancel())
        try:
            answer = await approval.request(execution, reason)
        except Exception as exc:
            _log.warning("approval service failed for tool %r", execution.name, exc_info=exc)
            return _denied(
                execution,
                f"approval required{asked} but no one could approve it "
                f"(approval service failed: {type(exc).__name__}: {exc})",
            )
        finally:
            remove()
    if scope.cancelled_caught:
        return _aborted(execution, "while waiting for approval")
    if answer is True:
        return None
    if isinstance(answer, Deny):  # the service says why (e.g. nobody answered in time)
        return deny_result(execution, answer)
    return _denied(execution, f"the approver declined{asked}")


def _denied(
    execution: ToolExecution, message: str, meta: dict[str, Any] | None = None
) -> ToolResult:
    return error_result(
        DENIED, f"tool call denied: {message}", call_id=execution.call_id, meta=meta
    )


def deny_result(execution: ToolExecution, decision: Deny) -> ToolResult:
    """The ``DENIED`` result for a ``Deny`` decision (``info`` becomes ``meta``)."""
    return _denied(execution, decision.reason or "no reason given", decision.info)


async def guard_verdict(guard: Any, execution: ToolExecution) -> ToolResult | None:
    """Run one guard: ``None``/``Allow()`` passes; a ``str`` or ``Deny`` denies.

    Guards fail closed: an exception or any other return value denies (and is logged).
    """
    try:
        verdict = guard(execution)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        _log.warning("tool guard %r raised; denying the call", guard, exc_info=exc)
        return _denied(execution, f"guard failed ({type(exc).__name__}: {exc})")
    if verdict is None or isinstance(verdict, Allow):
        return None
    if isinstance(verdict, Deny):
        return deny_result(execution, verdict)
    if isinstance(verdict, str):
        return _denied(execution, verdict or "denied by a guard")
    _log.warning("tool guard %r returned %r; denying the call", guard, verdict)
    return _denied(execution, f"guard returned an invalid verdict {verdict!r}")


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
    raise TypeError(
        f"a tools/post-execute listener returned {decision!r}; expected Accept(...) or Block(...)"
    )
