"""The registry behind ``ctx.tools``: definitions, scoped shadowing, guards, lookup,
classification, and the per-agent trackers of sync bodies that outlive their call.

Visibility: a registration for agent ``A`` is visible to ``A`` only and shadows a global tool
of the same name for ``A``; a registration with no agent is global. Removal is by the
:class:`Disposer` each ``add`` returns (the runtime ties it to the registering scope).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from .._disposer import Disposer
from .._scoped import ScopedRegistry
from ..errors import InvalidValueError
from ._grace import DEFAULT_CANCEL_GRACE, DEFAULT_DISPOSAL_GRACE

if TYPE_CHECKING:
    from ._bodies import BodyTracker
    from ._decisions import ToolDefinition, ToolExecution
    from ._define import Tool

__all__ = [
    "DEFAULT_CANCEL_GRACE",
    "DEFAULT_DISPOSAL_GRACE",
    "ExecutionMode",
    "Guard",
    "Registry",
    "classify",
]

_log = logging.getLogger("agentloop_nb.tools")

ExecutionMode = Literal["parallel", "exclusive"]
#: ``guard(execution) -> None | str | Deny`` (sync or async): a reason denies, ``None`` passes.
#: (``ToolExecution`` by name: the registry, which ``App()`` builds, loads no tool machinery.)
Guard = Callable[["ToolExecution"], Any]


class Registry:
    """Tools, guards and body trackers shared by a runtime and every view bound from it."""

    __slots__ = ("cancel_grace", "disposal_grace", "guards", "tools", "trackers")

    def __init__(self) -> None:
        # Global and agent-scoped definitions; an agent's own shadows a global namesake.
        self.tools: ScopedRegistry[Tool] = ScopedRegistry("tool", unique=True)
        # Copy-on-write so a pipeline iterating guards never sees a half-updated list.
        self.guards: tuple[tuple[Guard, Any], ...] = ()
        # id(agent) -> (agent, tracker), created on an agent's first sync body.
        self.trackers: dict[int, tuple[Any, BodyTracker]] = {}
        self.disposal_grace = DEFAULT_DISPOSAL_GRACE
        self.cancel_grace = DEFAULT_CANCEL_GRACE

    # -- definitions -----------------------------------------------------------------------

    def check_free(self, name: str, agent: Any) -> None:
        """Raise ``ValueError`` when ``name`` is taken in ``agent``'s visibility scope."""
        if not self.tools.taken(name, agent):
            return
        if agent is None:
            raise InvalidValueError(
                f"tool {name!r} is already registered; dispose the existing registration "
                "first (or register it through an agent's ctx to shadow it for that agent)"
            )
        raise InvalidValueError(
            f"tool {name!r} is already registered for agent {getattr(agent, 'id', agent)!r}; "
            "dispose the existing registration first"
        )

    def add(self, definition: Tool, agent: Any) -> Disposer:
        """Register ``definition`` for ``agent`` (``None``: global); raises like :meth:`check_free`."""
        self.check_free(definition.name, agent)
        return self.tools.add(definition.name, definition, agent)

    def lookup(self, name: str, agent: Any) -> Tool | None:
        """The definition ``agent`` would call for ``name`` (its own first, then global)."""
        return self.tools.lookup(name, agent)

    def definitions(self, agent: Any) -> list[Tool]:
        """Every definition visible to ``agent``, in registration order; a shadowing agent tool
        takes its global namesake's position, agent-only tools follow the global ones."""
        return [definition for _, definition in self.tools.visible(agent)]

    def count(self) -> int:
        """How many global tools are registered."""
        return len(self.tools.visible(None))

    # -- guards ----------------------------------------------------------------------------

    def add_guard(self, fn: Guard, agent: Any) -> Disposer:
        entry = (fn, agent)
        self.guards = (*self.guards, entry)

        def remove() -> None:
            self.guards = tuple(g for g in self.guards if g is not entry)

        return Disposer(remove)

    def guards_for(self, agent: Any) -> Iterator[Guard]:
        """The guards that apply to ``agent``'s calls (global ones and its own), in order."""
        for fn, scope_agent in self.guards:
            if scope_agent is None or scope_agent is agent:
                yield fn

    # -- bodies outliving their call -------------------------------------------------------

    def tracker(self, agent: Any) -> BodyTracker | None:
        """``agent``'s body tracker, created on first use and owned by ``agent.ctx``'s scope
        (whose disposal then waits for the tracked bodies). ``None`` without an agent, or when
        its context cannot own one (already disposed, or not a scope)."""
        if agent is None:
            return None
        entry = self.trackers.get(id(agent))
        if entry is not None:
            return entry[1]
        effect = getattr(getattr(agent, "ctx", None), "effect", None)
        if effect is None:
            return None
        from ._bodies import BodyTracker  # loaded with the first tool definition already

        tracker = BodyTracker(lambda: self.disposal_grace)
        key = id(agent)

        def teardown() -> Any:
            if self.trackers.get(key, (None, None))[1] is tracker:
                del self.trackers[key]
            return tracker.teardown()

        try:
            effect(lambda: teardown)
        except Exception:  # the agent's scope is gone: nothing could wait for the body
            _log.debug("agent %r cannot own a tool body tracker", agent, exc_info=True)
            return None
        self.trackers[key] = (agent, tracker)
        return tracker


def classify(definition: ToolDefinition | None, args: dict[str, Any] | None) -> ExecutionMode:
    """``"parallel"`` only when ``definition.concurrency_safe`` is (or returns, for ``args``)
    exactly ``True``; an unknown tool, unparsable arguments or a raising callable →
    ``"exclusive"`` (a raising callable is logged)."""
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
