"""Phase 1 of a call, admission: may this call run at all?

In order: the tool must be known (``UNKNOWN_TOOL``), its arguments a JSON object that passes
the schema (``INVALID_ARGS``); the ``tools/pre-execute`` waterfall answers ``Allow``, ``Deny``
(→ ``DENIED``) or ``Ask``; the guards may deny; an ``Ask`` then needs the approval service's
``True`` (or ``ApproveEdited(args)``: the person edited the arguments, which are checked
against the schema again and replace the model's; ``execution.edited_from`` keeps those). Guards run before the approver is asked, so nobody is asked to approve a call policy
forbids anyway. Tool problems become error results; only listener failures raise.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from typing import Any

import orjson

from .._json import dumps_arguments
from ..context import EVERY_NAME, listened
from ..errors import InvalidTypeError
from ..signals import AbortError, AbortScope
from ._decisions import (
    ABORTED,
    CALL_CANCELLED,
    CANCELLED,
    DENIED,
    INVALID_ARGS,
    UNKNOWN_TOOL,
    ToolExecution,
    ToolResult,
    drop_admitted,
    error_result,
    keep_admitted,
)
from ._define import Tool, checked_args
from ._hooks import ALLOW, PRE_EXECUTE, allow
from ._settle import announce_settled
from ._verdicts import Allow, ApproveEdited, Ask, Deny

__all__ = ["PENDING", "aborted", "admit", "admit_now", "parse_arguments"]

_log = logging.getLogger("agentloop_nb.tools")

_orjson_loads = orjson.loads
_LONG_DIGITS = re.compile(r"\d{19}")


def parse_arguments(arguments: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(args, None)`` for a JSON object (an empty/blank string counts as ``{}``), else
    ``(None, problem)``."""
    if not arguments or arguments.isspace():
        return {}, None
    if arguments == "{}":  # what models send for a tool without parameters: skip the parser
        return {}, None
    try:
        # orjson parses a small object ~8x faster; where it differs from json (it rejects
        # NaN, Infinity, lone surrogates, a number beyond a double, and reads an integer
        # of 19+ digits beyond 64 bits as a float) json decides, so the value is json's
        if _LONG_DIGITS.search(arguments) is None:
            try:
                value = _orjson_loads(arguments)
            except ValueError:  # orjson.JSONDecodeError: json's verdict and message
                value = json.loads(arguments)
        else:
            value = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        detail = (
            f"{exc.msg} at position {exc.pos}" if isinstance(exc, json.JSONDecodeError) else exc
        )
        return None, f"arguments are not valid JSON ({detail})"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


async def admit(execution: ToolExecution, registry: Any, fallback: Any) -> ToolResult | None:
    """``None`` when the call may run, else the error result that replaces it (announced on
    ``tools/settled``).

    ``registry`` (the tool registry) names the tools the agent could call (quoted for an
    unknown one) and gives the agent's guards in order; the approval service is
    ``execution.ctx.approval``, else ``fallback.approval``; it is only looked up for an
    ``Ask``. An abort of the execution's signal before or while the ``tools/pre-execute``
    listeners decide gives ``ABORTED``. Raises ``TypeError`` if a listener answers something
    other than a pre-execute decision; listener exceptions propagate (plugin failure).
    """
    refusal = _check_call(execution, registry)
    if refusal is None:
        if PRE_EXECUTE in listened(execution.ctx) or registry.guards:
            refusal = await _decide(execution, registry, fallback)
        elif execution.signal.aborted:
            # fast path (benchmarks/bench_ab.py, unobserved hooks): Allow(), undispatched
            refusal = aborted(execution, "before the tool ran")
        else:
            return None
    if refusal is not None:
        announce_settled(execution, refusal)
    return refusal


#: What :func:`admit_now` answers for a call whose admission has something to await.
PENDING: Any = object()


def admit_now(execution: ToolExecution, registry: Any) -> ToolResult | None:
    """:func:`admit` when it has nothing to await (no ``tools/pre-execute`` listener, no
    guard): ``None`` when the call may run, else its refusal (announced on ``tools/settled``);
    :data:`PENDING` when it has (nothing was done: await :func:`admit`). The tool pool admits
    each call with it (a coroutine fewer per call)."""
    # (``listened`` inlined: a frame a pooled call)
    if PRE_EXECUTE in getattr(execution.ctx, "listened", EVERY_NAME) or registry.guards:
        return PENDING
    refusal = _check_call(execution, registry)
    if refusal is None:
        if not execution.signal.aborted:
            return None
        refusal = aborted(execution, "before the tool ran")
    announce_settled(execution, refusal)
    return refusal


async def _decide(execution: ToolExecution, registry: Any, fallback: Any) -> ToolResult | None:
    """The ``tools/pre-execute`` waterfall, the guards and an ``Ask``'s approval."""
    ctx = execution.ctx
    if PRE_EXECUTE not in listened(ctx):
        if execution.signal.aborted:
            return aborted(execution, "before the tool ran")
        decision: Any = ALLOW
    else:
        drop_admitted(execution)  # a listener may change the arguments: validate again
        try:
            decision = await ctx.waterfall(PRE_EXECUTE, execution, allow, signal=execution.signal)
        except AbortError:
            if not execution.signal.aborted:  # a listener's own AbortError: a plugin failure
                raise
            return aborted(execution, "before the tool ran")
    if isinstance(decision, Deny):
        return deny_result(execution, decision)
    if not isinstance(decision, Allow | Ask):
        raise InvalidTypeError(
            f"a tools/pre-execute listener returned {decision!r}; "
            "expected Allow(), Deny(reason) or Ask(reason)"
        )
    for fn in registry.guards_for(execution.agent):
        drop_admitted(execution)  # a guard sees the execution: validate again
        denied = await _guard_verdict(fn, execution)
        if denied is not None:
            return denied
    if isinstance(decision, Ask):
        drop_admitted(execution)  # the approval service sees the execution
        return await _ask_approval(_approval(execution.ctx, fallback), execution, decision.reason)
    return None


def _approval(ctx: Any, fallback: Any) -> Any:
    """The approval service: ``ctx.approval``, else ``fallback.approval`` (or ``None``)."""
    for candidate in (ctx, fallback):
        try:
            service = getattr(candidate, "approval", None)
        except Exception:  # a context may raise its own error for a missing service
            service = None
        if service is not None:
            return service
    return None


def _check_call(execution: ToolExecution, registry: Any) -> ToolResult | None:
    """The resolution and argument checks, which need no hook."""
    definition = execution.tool
    if definition is None:
        names = [d.name for d in registry.definitions(execution.agent)]
        listing = f"available tools: {', '.join(names)}" if names else "no tools are available"
        return error_result(
            UNKNOWN_TOOL,
            f"unknown tool {execution.name!r}; {listing}",
            call_id=execution.call_id,
        )
    problem = execution.args_error
    args = execution.args
    if args is not None:
        try:
            if type(definition) is Tool:  # (a subclass may override validate_args)
                keep_admitted(execution, args, checked_args(definition, args))
            else:
                definition.validate_args(args)
        except Exception as exc:
            problem = str(exc)
        else:
            return None
    return error_result(
        INVALID_ARGS,
        f"invalid arguments for tool {execution.name!r}: {problem}",
        call_id=execution.call_id,
    )


def aborted(execution: ToolExecution, when: str) -> ToolResult:
    """The ``ABORTED`` result for a call stopped by its signal ``when`` (quoting the reason);
    ``CANCELLED`` when the user cancelled this call alone."""
    reason = execution.signal.reason
    if reason == CALL_CANCELLED:
        return error_result(CANCELLED, "cancelled by the user", call_id=execution.call_id)
    suffix = f" (reason: {reason})" if reason is not None else ""
    return error_result(ABORTED, f"tool call aborted {when}{suffix}", call_id=execution.call_id)


def _denied(
    execution: ToolExecution, message: str, meta: dict[str, Any] | None = None
) -> ToolResult:
    return error_result(
        DENIED, f"tool call denied: {message}", call_id=execution.call_id, meta=meta
    )


def deny_result(execution: ToolExecution, decision: Deny) -> ToolResult:
    """The ``DENIED`` result for a ``Deny`` decision (``info`` becomes ``meta``)."""
    return _denied(execution, decision.reason or "no reason given", decision.info)


async def _guard_verdict(guard: Any, execution: ToolExecution) -> ToolResult | None:
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


async def _ask_approval(
    approval: Any, execution: ToolExecution, reason: str | None
) -> ToolResult | None:
    """Ask ``approval.request(execution, reason)``; ``None`` (go) only on an exact ``True``.

    A missing service, a raising one or a ``False`` answer is a ``DENIED`` result (a ``Deny``
    answer is one quoting its reason); an abort while waiting is an ``ABORTED`` result;
    ``ApproveEdited`` goes with the edited arguments (see :func:`_apply_edit`). The
    execution's ``on_approval`` hears the question and then its answer.
    """
    asked = f" ({reason})" if reason else ""
    if approval is None or not callable(getattr(approval, "request", None)):
        return _denied(
            execution,
            f"approval required{asked} but no one could approve it (no approval service)",
        )
    signal = execution.signal
    if signal.aborted:
        return aborted(execution, "while waiting for approval")
    note = execution.on_approval
    if note is not None:
        note("asked", reason)
    answered = "aborted"  # also when the task itself is cancelled while waiting
    try:
        try:
            with AbortScope(signal, strict=False):
                answer = await approval.request(execution, reason)
        except AbortError:
            return aborted(execution, "while waiting for approval")
        except Exception as exc:
            answered = "failed"
            _log.warning("approval service failed for tool %r", execution.name, exc_info=exc)
            return _denied(
                execution,
                f"approval required{asked} but no one could approve it "
                f"(approval service failed: {type(exc).__name__}: {exc})",
            )
        if answer is True:
            answered = "approved"
            return None
        if isinstance(answer, ApproveEdited):
            answered = "edited"
            return _apply_edit(execution, answer.args)
        answered = "denied"
        if isinstance(answer, Deny):  # the service says why (e.g. nobody answered in time)
            return deny_result(execution, answer)
        return _denied(execution, f"the approver declined{asked}")
    finally:
        if note is not None:
            note(answered, None)


def _apply_edit(execution: ToolExecution, args: dict[str, Any]) -> ToolResult | None:
    """Run the call with the approver's ``args``: ``INVALID_ARGS`` when they fail the tool's
    schema (the person's edit is checked like the model's arguments), else ``None`` with the
    execution's ``args``/``arguments`` replaced and ``edited_from`` holding the model's."""
    definition = execution.tool
    assert definition is not None  # admission resolved it before asking
    try:
        definition.validate_args(args)
        arguments = dumps_arguments(args)
    except (ValueError, TypeError) as exc:
        return error_result(
            INVALID_ARGS,
            f"the arguments edited at approval are invalid for tool {execution.name!r}: {exc}",
            call_id=execution.call_id,
        )
    execution.edited_from = execution.args
    execution.args = dict(args)
    execution.arguments = arguments
    return None
