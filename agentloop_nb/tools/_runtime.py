"""``ToolRuntime``: the ``ctx.tools`` service, a facade over the registry and the phases.

Visibility: a registration made through a context scoped to agent ``A`` (``A.ctx.tools``) is
visible to ``A`` only and shadows a global tool of the same name for ``A``; registrations made
through a context with no agent are global. Ownership: a registration through a context belongs
to that context's scope (its fiber/effects), so disposing the scope unregisters it.

One call, top to bottom (the loop drives the phases itself so that only bodies overlap)::

    execution = tools.new_execution(call, agent=agent, signal=signal, turn=t, step=s)
    result = await tools.pre_execute(execution)   # _admit: checks, pre-execute, guards, Ask
    if result is None:
        result = await tools.dispatch(execution)  # _dispatch: tools/execute around the body
    # both emit tools/settled once the outcome is known (_settle.announce_settled)
    result = await tools.post_execute(execution, result)  # _settle: post-execute, finalize, result

``execute(execution)`` runs all three. Tool problems never raise: they are error results.
Exceptions raised by *listeners* of ``tools/pre-execute``, ``tools/execute`` and
``tools/post-execute`` are plugin failures and propagate to the caller (the loop ends the turn).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .._disposer import Disposer
from .._scoped import OwnedCopy
from ..errors import InvalidValueError
from ..signals import AbortController, AbortSignal
from ._registry import ExecutionMode, Guard, Registry, classify

if TYPE_CHECKING:
    from types import ModuleType

    from ._decisions import ToolExecution, ToolResult
    from ._define import Tool

__all__ = ["ExecutionMode", "Guard", "ToolRuntime", "registry_of"]


class _Phases:
    """The pipeline's phases (``_admit``, ``_dispatch``, ``_settle`` with ``_hooks``' constant
    decisions) and the execution record's module (``_decisions``, with ``ToolResult``), loaded
    with the first call that uses one: ``import agentloop_nb`` and ``App()`` run no tool call
    and define no tool (start-up cost). One global read per call after."""

    __slots__ = (
        "ToolExecution",
        "admit",
        "announce_settled",
        "build_execution",
        "dispatch",
        "parse_arguments",
        "settle",
        "take_scope",
    )

    def __init__(
        self, decisions: ModuleType, admit: ModuleType, dispatch: ModuleType, settle: ModuleType
    ) -> None:
        self.ToolExecution = decisions.ToolExecution
        self.build_execution = decisions.new_execution
        self.take_scope = decisions.take_scope
        self.admit = admit.admit
        self.parse_arguments = admit.parse_arguments
        self.dispatch = dispatch.dispatch
        self.announce_settled = settle.announce_settled
        self.settle = settle.settle


_PHASES: _Phases | None = None


def _phases() -> _Phases:
    global _PHASES
    from . import _admit, _decisions, _dispatch, _settle

    _PHASES = _Phases(_decisions, _admit, _dispatch, _settle)
    return _PHASES


class ToolRuntime(OwnedCopy):
    """The ``ctx.tools`` service. ``ToolRuntime(ctx)`` dispatches agent-less hooks through
    ``ctx``; through a context (``ctx.tools``) it is a bound view sharing the same registry.

    ``ctx`` needs ``waterfall`` and ``emit``; a bound view's context needs ``effect`` (to own
    its registrations) and ``agent``. The view (``__bind__``, from :class:`OwnedCopy`) shares
    the registry; its registrations are owned by the binding context's scope and visible to
    that context's agent.
    """

    __slots__ = ("_ctx", "_owner", "_registry")

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._registry = Registry()
        self._owner: Any = None

    @property
    def disposal_grace(self) -> float:
        """Seconds an agent's disposal waits for its sync tool bodies still running in their
        threads (default 10); a body still running then is abandoned with a warning on the
        ``agentloop_nb.tools`` logger. Shared by every view; read at each disposal."""
        return self._registry.disposal_grace

    @disposal_grace.setter
    def disposal_grace(self, seconds: float) -> None:
        if not seconds >= 0:
            raise InvalidValueError(
                f"disposal_grace must be a number of seconds >= 0, got {seconds!r}"
            )
        self._registry.disposal_grace = float(seconds)

    @property
    def cancel_grace(self) -> float:
        """Seconds a tool body whose call is over (the turn or the call was cancelled, or the
        tool's timeout passed) may take to end when it ignores its cancellation (default 1;
        never more than :attr:`disposal_grace`). An async body still running then is closed at
        its await with a warning, so a cancelled turn ends promptly; a sync body is abandoned
        in its thread at once whatever this says (it cannot be interrupted) and its late result
        dropped. Shared by every view; read when a call is cancelled."""
        return self._registry.cancel_grace

    @cancel_grace.setter
    def cancel_grace(self, seconds: float) -> None:
        if not seconds >= 0:
            raise InvalidValueError(
                f"cancel_grace must be a number of seconds >= 0, got {seconds!r}"
            )
        self._registry.cancel_grace = float(seconds)

    # -- registry ----------------------------------------------------------------------------

    def _scope_agent(self) -> Any:
        return None if self._owner is None else getattr(self._owner, "agent", None)

    def _agent(self, agent: Any) -> Any:
        return agent if agent is not None else self._scope_agent()

    def register(self, tool_or_function: Tool | Callable[..., Any]) -> Disposer:
        """Register a tool (a plain function is wrapped with ``@tool``); returns its disposer.

        Raises ``ValueError`` when the name is already registered in the same visibility scope
        (global, or this agent's), ``TypeError`` for a function ``@tool`` cannot describe.
        """
        from ._define import Tool, as_tool  # the first definition loads them

        if isinstance(tool_or_function, Tool):
            definition = tool_or_function
        else:
            definition = as_tool(tool_or_function, localns=sys._getframe(1).f_locals)
        agent = self._scope_agent()
        registry = self._registry
        registry.check_free(definition.name, agent)
        if self._owner is None:
            return registry.add(definition, agent)
        return self._owner.effect(lambda: registry.add(definition, agent))

    def guard(self, fn: Guard) -> Disposer:
        """Add a monotonic deny policy: ``fn(execution)`` (sync or async) returns ``None`` to
        pass, or a reason ``str`` / ``Deny`` to deny. Guards run after ``tools/pre-execute`` and
        can only deny; a raising guard denies (fail closed). A guard registered through an
        agent's ctx applies to that agent only."""
        agent = self._scope_agent()
        registry = self._registry
        if self._owner is None:
            return registry.add_guard(fn, agent)
        return self._owner.effect(lambda: registry.add_guard(fn, agent))

    def lookup(self, name: str, agent: Any = None) -> Tool | None:
        """The definition ``agent`` would call for ``name`` (its own first, then global)."""
        # (the registry's scoped table itself: two frames fewer, and the loop asks per call)
        return self._registry.tools.lookup(
            name, agent if agent is not None else self._scope_agent()
        )

    def definitions(self, agent: Any = None) -> list[Tool]:
        """Every definition visible to ``agent``, in registration order; a shadowing agent tool
        takes its global namesake's position, agent-only tools follow the global ones."""
        return self._registry.definitions(self._agent(agent))

    def schemas(self, agent: Any = None) -> list[dict[str, Any]]:
        """``[{"name", "description", "parameters"}, ...]`` for ``definitions(agent)``."""
        # (the registry's scoped table itself, as ``lookup``: the prompt asks every step)
        visible = self._registry.tools.visible(agent if agent is not None else self._scope_agent())
        return [definition.schema() for _, definition in visible]

    def execution_mode(self, call: Any, agent: Any = None) -> ExecutionMode:
        """``"parallel"`` only when the tool's ``concurrency_safe`` is (or returns) exactly
        ``True``; an unknown tool, unparsable arguments or a raising callable → ``"exclusive"``.

        ``call`` is a ``ToolExecution`` or any object with ``name`` and ``arguments`` (a
        ``ToolCallBlock``). A callable ``concurrency_safe`` is asked again at every call, so
        the answer may change between calls (the loop asks right before each call starts).
        """
        phases = _PHASES or _phases()
        if isinstance(call, phases.ToolExecution):
            return classify(call.tool, call.args)
        definition = self.lookup(call.name, agent)
        if definition is None:
            return "exclusive"
        return classify(definition, phases.parse_arguments(call.arguments or "")[0])

    # -- the phases of one call --------------------------------------------------------------

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
        if agent is None:  # (``_agent`` inlined: the loop makes one execution per call)
            agent = self._scope_agent()
        # (each field read once: a model's attribute goes through pydantic's __getattr__ hook)
        arguments, name = call.arguments or "", call.name
        phases = _PHASES or _phases()
        args, problem = phases.parse_arguments(arguments)
        agent_ctx = getattr(agent, "ctx", None) if agent is not None else None
        # ``ToolExecution(call_id=..., ...)`` without the keyword call (one per tool call)
        return phases.build_execution(
            call.id,
            name,
            arguments,
            args,
            self._registry.tools.lookup(name, agent),
            agent,
            signal if signal is not None else AbortController().signal,
            turn,
            step,
            agent_ctx if agent_ctx is not None else self._ctx,
            problem,
        )

    def pre_execute(self, execution: ToolExecution) -> Coroutine[Any, Any, ToolResult | None]:
        """Admission (await the result): ``None`` means go; a result means the call must not
        run (and ``tools/settled`` has been emitted with it).

        In order: unknown tool → ``UNKNOWN_TOOL``; arguments that are not a JSON object or fail
        the schema → ``INVALID_ARGS``; the ``tools/pre-execute`` waterfall (default ``Allow()``):
        ``Deny`` → ``DENIED``; the guards (any deny → ``DENIED``); then for ``Ask`` the approval
        service (``ctx.approval``): only a ``True`` answer proceeds.

        Raises ``TypeError`` if a listener answers something other than a pre-execute decision;
        listener exceptions propagate (plugin failure). (Not itself a coroutine: it runs for
        every call, and each delegating frame costs.)
        """
        return (_PHASES or _phases()).admit(execution, self._registry, self._ctx)

    def dispatch(self, execution: ToolExecution) -> Coroutine[Any, Any, ToolResult]:
        """Dispatch an admitted call (await the result): the ``tools/execute`` waterfall, whose
        default runs the body (timeout → ``TOOL_TIMEOUT``, abort → ``ABORTED``, exception →
        ``TOOL_ERROR``); then ``tools/settled`` is emitted with the result.

        Call only after :meth:`pre_execute` returned ``None`` (an unresolved call is admitted
        here first, so nothing runs). Raises ``TypeError`` if a listener answers something
        other than a ``ToolResult``; listener exceptions propagate. (Not itself a coroutine,
        as :meth:`pre_execute`.)
        """
        if execution.tool is None:
            (_PHASES or _phases()).take_scope(execution)  # no body runs
            return self._refuse(execution)
        return (_PHASES or _phases()).dispatch(execution, self._registry)

    async def _refuse(self, execution: ToolExecution) -> ToolResult:
        refusal = await self.pre_execute(execution)
        assert refusal is not None
        return refusal

    def post_execute(
        self, execution: ToolExecution, result: ToolResult
    ) -> Coroutine[Any, Any, ToolResult]:
        """Settle the call (await the result): the ``tools/post-execute`` waterfall (default
        ``Accept()``) and its decision, the tool's ``finalize_content`` (successful results
        only; failure → ``TOOL_ERROR``), then ``tools/result``. Call it for every result,
        early errors included, so observers see every call. Listener exceptions propagate."""
        return (_PHASES or _phases()).settle(execution, result)

    async def execute(self, execution: ToolExecution) -> ToolResult:
        """``pre_execute``, then ``dispatch`` when admitted, then ``post_execute``."""
        result = await self.pre_execute(execution)
        if result is None:
            result = await self.dispatch(execution)
        return await self.post_execute(execution, result)

    def __repr__(self) -> str:
        scope = "" if self._owner is None else f" bound agent={self._scope_agent()!r}"
        return f"<ToolRuntime tools={self._registry.count()}{scope}>"


def registry_of(tools: ToolRuntime) -> Registry:
    """The registry ``tools`` (or any view of it) shares: what the tool pool hands to the
    phases it runs without the facade's frames (``_admit.admit_now``); not public API."""
    return tools._registry
