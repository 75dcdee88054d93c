"""``ToolRuntime``: the ``ctx.tools`` service (registry, guards, and the phased pipeline).

Visibility: a registration made through a context scoped to agent ``A`` (``A.ctx.tools``) is
visible to ``A`` only and shadows a global tool of the same name for ``A``; registrations made
through a context with no agent are global. Ownership: a registration through a context belongs
to that context's scope (its fiber/effects), so disposing the scope unregisters it.

The loop drives the pipeline in phases so that only bodies overlap::

    execution = tools.new_execution(call, agent=agent, signal=signal, turn=t, step=s)
    result = await tools.pre_execute(execution)        # None = go
    if result is None:
        result = await tools.dispatch(execution)       # tools/execute waterfall around the body
    result = await tools.post_execute(execution, result)   # Accept/Block, then tools/result

``execute(execution)`` runs all three. Tool problems never raise: they are error results.
Exceptions raised by *listeners* of ``tools/pre-execute``, ``tools/execute`` and
``tools/post-execute`` are plugin failures and propagate to the caller (the loop ends the turn).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Literal

from .._disposer import Disposer
from ..signals import AbortController, AbortSignal
from ._decisions import (
    INVALID_ARGS,
    UNKNOWN_TOOL,
    Accept,
    Allow,
    Ask,
    Deny,
    PostExecutePayload,
    ToolExecution,
    ToolResult,
    ToolResultPayload,
    error_result,
)
from ._define import Tool, as_tool
from ._pipeline import (
    apply_post_decision,
    ask_approval,
    deny_result,
    guard_verdict,
    parse_arguments,
    run_body,
)

__all__ = ["ExecutionMode", "Guard", "ToolRuntime"]

_log = logging.getLogger("agentloop_nb.tools")

ExecutionMode = Literal["parallel", "exclusive"]
#: ``guard(execution) -> None | str | Deny`` (sync or async): a reason denies, ``None`` passes.
Guard = Callable[[ToolExecution], Any]


class _State:
    """Registry shared by a runtime and every view bound from it."""

    __slots__ = ("global_tools", "guards", "scoped")

    def __init__(self) -> None:
        # Dicts keep insertion order, which is the schema order.
        self.global_tools: dict[str, Tool] = {}
        # id(agent) -> (agent, tools); the agent reference keeps the id from being reused.
        self.scoped: dict[int, tuple[Any, dict[str, Tool]]] = {}
        # Copy-on-write so a pipeline iterating guards never sees a half-updated list.
        self.guards: tuple[tuple[Guard, Any], ...] = ()


# Decisions are frozen, so the waterfalls' defaults can share one instance each.
_ALLOW = Allow()
_ACCEPT = Accept()


def _allow() -> Allow:
    return _ALLOW


def _accept() -> Accept:
    return _ACCEPT


def _observed(ctx: Any, name: str) -> bool:
    """Whether dispatching ``name`` through ``ctx`` could reach a listener (a dispatcher
    without ``has_listeners`` is assumed observed: the hook then always runs)."""
    has = getattr(ctx, "has_listeners", None)
    return True if has is None else bool(has(name))


class ToolRuntime:
    """The ``ctx.tools`` service. ``ToolRuntime(ctx)`` dispatches agent-less hooks through
    ``ctx``; through a context (``ctx.tools``) it is a bound view sharing the same registry.

    ``ctx`` needs ``waterfall`` and ``emit``; a bound view's context needs ``effect`` (to own
    its registrations) and ``agent``.
    """

    __slots__ = ("_ctx", "_owner", "_state")

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._state = _State()
        self._owner: Any = None

    def __bind__(self, ctx: Any) -> ToolRuntime:
        """A view whose registrations are owned by ``ctx``'s scope and visible to ``ctx.agent``."""
        view = object.__new__(ToolRuntime)
        view._ctx = self._ctx
        view._state = self._state
        view._owner = ctx
        return view

    # -- registry ----------------------------------------------------------------------------

    def _scope_agent(self) -> Any:
        return None if self._owner is None else getattr(self._owner, "agent", None)

    def register(self, tool_or_function: Tool | Callable[..., Any]) -> Disposer:
        """Register a tool (a plain function is wrapped with ``@tool``); returns its disposer.

        Raises ``ValueError`` when the name is already registered in the same visibility scope
        (global, or this agent's), ``TypeError`` for a function ``@tool`` cannot describe.
        """
        if isinstance(tool_or_function, Tool):
            definition = tool_or_function
        else:
            definition = as_tool(tool_or_function, localns=sys._getframe(1).f_locals)
        agent = self._scope_agent()
        self._check_free(definition.name, agent)
        if self._owner is None:
            return Disposer(self._add(definition, agent))
        return self._owner.effect(lambda: self._add(definition, agent))

    def _check_free(self, name: str, agent: Any) -> None:
        if agent is None:
            if name in self._state.global_tools:
                raise ValueError(
                    f"tool {name!r} is already registered; dispose the existing registration "
                    "first (or register it through an agent's ctx to shadow it for that agent)"
                )
            return
        entry = self._state.scoped.get(id(agent))
        if entry is not None and name in entry[1]:
            raise ValueError(
                f"tool {name!r} is already registered for agent {getattr(agent, 'id', agent)!r}; "
                "dispose the existing registration first"
            )

    def _add(self, definition: Tool, agent: Any) -> Disposer:
        self._check_free(definition.name, agent)
        state = self._state
        if agent is None:
            table = state.global_tools
        else:
            entry = state.scoped.get(id(agent))
            if entry is None:
                entry = state.scoped[id(agent)] = (agent, {})
            table = entry[1]
        table[definition.name] = definition

        def remove() -> None:
            if table.get(definition.name) is definition:
                del table[definition.name]
            if agent is not None and not table:
                current = state.scoped.get(id(agent))
                if current is not None and current[1] is table:
                    del state.scoped[id(agent)]

        return Disposer(remove)

    def guard(self, fn: Guard) -> Disposer:
        """Add a monotonic deny policy: ``fn(execution)`` (sync or async) returns ``None`` to
        pass, or a reason ``str`` / ``Deny`` to deny. Guards run after ``tools/pre-execute`` and
        can only deny; a raising guard denies (fail closed). A guard registered through an
        agent's ctx applies to that agent only."""
        agent = self._scope_agent()
        if self._owner is None:
            return Disposer(self._add_guard(fn, agent))
        return self._owner.effect(lambda: self._add_guard(fn, agent))

    def _add_guard(self, fn: Guard, agent: Any) -> Disposer:
        entry = (fn, agent)
        state = self._state
        state.guards = (*state.guards, entry)

        def remove() -> None:
            state.guards = tuple(g for g in state.guards if g is not entry)

        return Disposer(remove)

    def lookup(self, name: str, agent: Any = None) -> Tool | None:
        """The definition ``agent`` would call for ``name`` (its own first, then global)."""
        agent = agent if agent is not None else self._scope_agent()
        if agent is not None:
            entry = self._state.scoped.get(id(agent))
            if entry is not None:
                found = entry[1].get(name)
                if found is not None:
                    return found
        return self._state.global_tools.get(name)

    def definitions(self, agent: Any = None) -> list[Tool]:
        """Every definition visible to ``agent``, in registration order; a shadowing agent tool
        takes its global namesake's position, agent-only tools follow the global ones."""
        agent = agent if agent is not None else self._scope_agent()
        globals_ = self._state.global_tools
        entry = self._state.scoped.get(id(agent)) if agent is not None else None
        if entry is None:
            return list(globals_.values())
        own = entry[1]
        out = [own.get(name, definition) for name, definition in globals_.items()]
        out.extend(definition for name, definition in own.items() if name not in globals_)
        return out

    def schemas(self, agent: Any = None) -> list[dict[str, Any]]:
        """``[{"name", "description", "parameters"}, ...]`` for ``definitions(agent)``."""
        return [definition.schema() for definition in self.definitions(agent)]

    def execution_mode(self, call: Any, agent: Any = None) -> ExecutionMode:
        """``"parallel"`` only when the tool's ``concurrency_safe`` is (or returns) exactly
        ``True``; an unknown tool, unparsable arguments or a raising callable → ``"exclusive"``.

        ``call`` is a ``ToolExecution`` or any object with ``name`` and ``arguments`` (a
        ``ToolCallBlock``).
        """
        if isinstance(call, ToolExecution):
            definition, args = call.tool, call.args
        else:
            definition = self.lookup(call.name, agent)
            args = parse_arguments(call.arguments)[0] if definition is not None else None
        if definition is None or args is None:
            return "exclusive"
        safe = definition.concurrency_safe
        if callable(safe):
            try:
                safe = safe(args)
            except Exception:
                _log.warning("concurrency_safe of tool %r raised", definition.name, exc_info=True)
                return "exclusive"
        return "parallel" if safe is True else "exclusive"

    # -- pipeline ----------------------------------------------------------------------------

    def new_execution(
        self,
        call: Any,
        *,
        agent: Any = None,
        signal: AbortSignal | None = None,
        turn: int = 0,
        step: int = 0,
    ) -> ToolExecution:
        """A ``ToolExecution`` for ``call`` (an object with ``id``, ``name``, ``arguments``).

        Resolves the tool for ``agent`` and parses the arguments (problems are reported later
        by :meth:`pre_execute`). Without ``signal`` the execution gets one that never aborts.
        """
        agent = agent if agent is not None else self._scope_agent()
        arguments = call.arguments or ""
        args, problem = parse_arguments(arguments)
        agent_ctx = getattr(agent, "ctx", None) if agent is not None else None
        return ToolExecution(
            call_id=call.id,
            name=call.name,
            arguments=arguments,
            args=args,
            args_error=problem,
            tool=self.lookup(call.name, agent),
            agent=agent,
            signal=signal if signal is not None else AbortController().signal,
            turn=turn,
            step=step,
            ctx=agent_ctx if agent_ctx is not None else self._ctx,
        )

    async def pre_execute(self, execution: ToolExecution) -> ToolResult | None:
        """Decide whether the call may run; ``None`` means go, a result means it must not.

        In order: unknown tool → ``UNKNOWN_TOOL``; arguments that are not a JSON object or fail
        the schema → ``INVALID_ARGS``; the ``tools/pre-execute`` waterfall (default ``Allow()``):
        ``Deny`` → ``DENIED``; the guards (any deny → ``DENIED``); then for ``Ask`` the approval
        service (``ctx.approval``): only a ``True`` answer proceeds. Guards run before the
        approver is asked so nobody is asked to approve a call policy forbids anyway.

        Raises ``TypeError`` if a listener answers something other than a pre-execute decision;
        listener exceptions propagate (plugin failure).
        """
        definition = execution.tool
        if definition is None:
            names = [d.name for d in self.definitions(execution.agent)]
            available = (
                f"available tools: {', '.join(names)}" if names else "no tools are available"
            )
            return error_result(
                UNKNOWN_TOOL,
                f"unknown tool {execution.name!r}; {available}",
                call_id=execution.call_id,
            )
        if execution.args is None:
            return error_result(
                INVALID_ARGS,
                f"invalid arguments for tool {execution.name!r}: {execution.args_error}",
                call_id=execution.call_id,
            )
        try:
            definition.validate_args(execution.args)
        except Exception as exc:
            return error_result(
                INVALID_ARGS,
                f"invalid arguments for tool {execution.name!r}: {exc}",
                call_id=execution.call_id,
            )
        ctx = execution.ctx
        if _observed(ctx, "tools/pre-execute"):
            decision = await ctx.waterfall("tools/pre-execute", execution, _allow)
        else:  # unobserved: the waterfall's default, without running the chain machinery
            decision = _ALLOW
        if isinstance(decision, Deny):
            return deny_result(execution, decision)
        if not isinstance(decision, Allow | Ask):
            raise TypeError(
                f"a tools/pre-execute listener returned {decision!r}; "
                "expected Allow(), Deny(reason) or Ask(reason)"
            )
        agent = execution.agent
        for fn, scope_agent in self._state.guards:
            if scope_agent is None or scope_agent is agent:
                denied = await guard_verdict(fn, execution)
                if denied is not None:
                    return denied
        if isinstance(decision, Ask):
            return await ask_approval(self._approval(ctx), execution, decision.reason)
        return None

    def _approval(self, ctx: Any) -> Any:
        for candidate in (ctx, self._ctx):
            try:
                service = getattr(candidate, "approval", None)
            except Exception:  # a context may raise its own error for a missing service
                service = None
            if service is not None:
                return service
        return None

    async def dispatch(self, execution: ToolExecution) -> ToolResult:
        """Run the ``tools/execute`` waterfall; its default runs the body (see ``run_body``:
        timeout → ``TOOL_TIMEOUT``, abort → ``ABORTED``, exception → ``TOOL_ERROR``).

        Call only after :meth:`pre_execute` returned ``None``. Raises ``TypeError`` if a
        listener answers something other than a ``ToolResult``; listener exceptions propagate.
        """
        if execution.tool is None:  # dispatch without pre_execute: still never run nothing
            result = await self.pre_execute(execution)
            assert result is not None
            return result

        ctx = execution.ctx
        if not _observed(ctx, "tools/execute"):
            return await run_body(execution)  # the waterfall's default, called directly

        async def body() -> ToolResult:
            return await run_body(execution)

        result = await ctx.waterfall("tools/execute", execution, body)
        if not isinstance(result, ToolResult):
            raise TypeError(f"a tools/execute listener returned {result!r}; expected a ToolResult")
        if result.call_id != execution.call_id:
            result = result.model_copy(update={"call_id": execution.call_id})
        return result

    async def post_execute(self, execution: ToolExecution, result: ToolResult) -> ToolResult:
        """Run the ``tools/post-execute`` waterfall (default ``Accept()``) and apply its
        decision, then emit ``tools/result``. Call it for every result, early errors included,
        so observers see every call. Listener exceptions propagate."""
        ctx = execution.ctx
        if _observed(ctx, "tools/post-execute"):
            decision = await ctx.waterfall(
                "tools/post-execute", PostExecutePayload(execution, result), _accept
            )
            final = apply_post_decision(result, decision)
        else:  # unobserved: the default Accept() keeps the result as is
            final = result
        if _observed(ctx, "tools/result"):
            ctx.emit("tools/result", ToolResultPayload(execution, final))
        return final

    async def execute(self, execution: ToolExecution) -> ToolResult:
        """``pre_execute``, then ``dispatch`` when allowed, then ``post_execute``."""
        result = await self.pre_execute(execution)
        if result is None:
            result = await self.dispatch(execution)
        return await self.post_execute(execution, result)

    def __repr__(self) -> str:
        scope = "" if self._owner is None else f" bound agent={self._scope_agent()!r}"
        return f"<ToolRuntime tools={len(self._state.global_tools)}{scope}>"
