"""``AgentRegistry``: the ``ctx.agents`` service, and ``AgentHandle``.

The registry is the directory of live agents and the seam through which plugins create, resume
or fork agents without depending on the loop: the loop registers itself as the *factory*
(``set_factory``) and publishes agents with ``enter``. ``create`` / ``resume`` / ``fork`` take
the creation vocabulary (``options=``, ``session_id=``, ``meta=``, ``setup=``, ``signal=``; the
aliases ``agent_options=`` and ``resume_session_id=``) and check it before the factory runs. The registry itself emits no events (the
loop owns ``agent/created`` / ``agent/disposed``).

Seen from any context other than the root (a plugin's, an agent's), ``ctx.agents`` is a view
whose ``create`` / ``resume`` make the new agent owned by that context's scope: unloading the
plugin (or disposing the scope) disposes the agent.

``current_initiator()`` is the agent whose driver is running the current code (a
``ContextVar``, so tasks a driver starts inherit it); ``None`` outside agents.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Never, Protocol

from ._creation import (
    CREATE_KEYWORDS,
    FORK_KEYWORDS,
    RESUME_KEYWORDS,
    AgentOptions,
    alias,
    reject_unknown,
)
from ._disposer import Disposer
from ._scoped import BoundView
from .errors import InvalidTypeError, InvalidValueError, UsageError

if TYPE_CHECKING:
    from .context import Context
    from .signals import AbortSignal

#: What ``AgentRegistry.current_initiator()`` reads: the agent whose driver runs the calling
#: code. Set through ``with_initiator``, or by the driver itself (``set``/``reset``: once a
#: wake, without the generator context manager's frames).
INITIATOR: ContextVar[Any] = ContextVar("agentloop_nb.initiator", default=None)

#: ``setup(agent_ctx)``, awaited (when it returns an awaitable) before a new agent is published.
Setup = Callable[["Context"], Awaitable[Any] | Any]


class AgentFactory(Protocol):
    """What :meth:`AgentRegistry.set_factory` takes (the agent loop's is the one an ``App``
    sets). Each method receives exactly the keywords the caller of ``ctx.agents`` gave (those
    not ``None``), under the names the caller used: a factory accepts the creation vocabulary
    *and* its aliases (``agent_options=``; ``resume_session_id=`` for ``resume``), so one written
    for the first contract's names keeps working. ``fork`` (``fork(source_session_id,
    **kwargs)``) is optional. Each may answer the handle or an awaitable of it."""

    @property
    def create(self) -> Callable[..., Awaitable[AgentHandle] | AgentHandle]: ...
    @property
    def resume(self) -> Callable[..., Awaitable[AgentHandle] | AgentHandle]: ...


class AgentHandle:
    """The only teardown capability for a programmatically created agent.

    ``await dispose()`` runs the teardown once: concurrent and later calls await the same
    teardown and see its outcome (its exception too). The teardown runs in its own task, so
    cancelling a caller that awaits ``dispose()`` does not interrupt it half-way.
    """

    __slots__ = ("_dispose_fn", "_teardown", "agent")

    def __init__(self, agent: Any, dispose_fn: Callable[[], Awaitable[Any] | Any]) -> None:
        self.agent = agent
        self._dispose_fn: Callable[[], Awaitable[Any] | Any] | None = dispose_fn
        self._teardown: asyncio.Future[Any] | None = None

    @property
    def disposed(self) -> bool:
        """Whether disposal has been requested (it may still be running)."""
        return self._dispose_fn is None

    async def dispose(self) -> None:
        teardown = self._teardown
        if teardown is None:
            fn, self._dispose_fn = self._dispose_fn, None
            assert fn is not None
            loop = asyncio.get_running_loop()
            try:
                result = fn()
            except Exception as exc:
                teardown = loop.create_future()
                teardown.set_exception(exc)
            else:
                if inspect.isawaitable(result):
                    teardown = asyncio.ensure_future(result)
                else:
                    teardown = loop.create_future()
                    teardown.set_result(result)
            self._teardown = teardown
        await asyncio.shield(teardown)

    def __repr__(self) -> str:
        agent_id = getattr(self.agent, "id", None)
        state = "disposed" if self.disposed else "live"
        return f"<AgentHandle {agent_id!r} {state}>"


class AgentRegistry:
    """The ``ctx.agents`` service.

    ``create``/``resume``/``fork`` delegate to the current factory and raise ``RuntimeError``
    when none is set. ``enter`` raises ``ValueError`` (``agent 'x' already exists``) on an id collision.
    """

    def __init__(self) -> None:
        self._agents: dict[str, Any] = {}
        self._factories: list[AgentFactory] = []

    def __bind__(self, ctx: Context) -> AgentRegistry | _ScopedAgents:
        """The registry itself from the root context; elsewhere a view whose creations are
        owned by ``ctx``'s scope."""
        return self if ctx.parent is None else _ScopedAgents(self, ctx)

    # -- factory seam ----------------------------------------------------------------------

    def set_factory(self, factory: AgentFactory) -> Disposer:
        """Make ``factory`` the one ``create``/``resume`` use. The latest one set wins; its
        disposer removes exactly that factory (revealing the previous one, if any)."""
        if not callable(getattr(factory, "create", None)):
            raise InvalidTypeError(
                f"{factory!r} is not an agent factory: it needs async create(**kw) and "
                "resume(**kw) methods"
            )
        factories = self._factories
        factories.append(factory)

        def remove() -> None:
            for i in range(len(factories) - 1, -1, -1):
                if factories[i] is factory:
                    del factories[i]
                    return

        return Disposer(remove)

    @property
    def factory(self) -> AgentFactory | None:
        return self._factories[-1] if self._factories else None

    def _require_factory(self, action: str) -> AgentFactory:
        if not self._factories:
            raise UsageError(
                f"cannot {action} an agent: no agent factory is set; ctx.agents needs the agent "
                "loop (build the context with App(), or call ctx.agents.set_factory(...))"
            )
        return self._factories[-1]

    async def create(
        self,
        *,
        session_id: str,
        options: AgentOptions | None = None,
        meta: Mapping[str, Any] | None = None,
        seed: Iterable[Any] | None = None,
        setup: Setup | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
        **unknown: Never,
    ) -> AgentHandle:
        """Create an agent on a new session with exactly ``session_id``, through the factory
        (the agent loop's: :meth:`AgentLoop.acreate <agentloop_nb.AgentLoop.acreate>`).
        ``agent_options=`` is an alias of ``options=``. ``TypeError`` for an unknown keyword or
        for both names of one parameter; ``RuntimeError`` when no factory is set."""
        reject_unknown("create", unknown, CREATE_KEYWORDS)
        alias("create", "options", options, "agent_options", agent_options)
        factory = self._require_factory("create")
        return await _call(
            factory.create,
            session_id=session_id,
            options=options,
            agent_options=agent_options,
            meta=meta,
            seed=seed,
            setup=setup,
            signal=signal,
        )

    async def resume(
        self,
        *,
        session_id: str | None = None,
        options: AgentOptions | None = None,
        setup: Setup | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
        resume_session_id: str | None = None,
        **unknown: Never,
    ) -> AgentHandle:
        """Resume the persisted session ``session_id`` (alias ``resume_session_id=``) through
        the factory (the agent loop's: :meth:`AgentLoop.resume <agentloop_nb.AgentLoop.resume>`).
        Errors as for :meth:`create`."""
        reject_unknown("resume", unknown, RESUME_KEYWORDS)
        alias("resume", "options", options, "agent_options", agent_options)
        _require_id(
            "resume",
            alias("resume", "session_id", session_id, "resume_session_id", resume_session_id),
        )
        factory = self._require_factory("resume")
        return await _call(
            factory.resume,
            session_id=session_id,
            resume_session_id=resume_session_id,
            options=options,
            agent_options=agent_options,
            setup=setup,
            signal=signal,
        )

    async def fork(
        self,
        source_session_id: str,
        *,
        at_seq: int | None = None,
        session_id: str | None = None,
        options: AgentOptions | None = None,
        setup: Setup | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
        **unknown: Never,
    ) -> AgentHandle:
        """Create an agent on a fork of ``source_session_id`` through the factory (the agent
        loop's: :meth:`AgentLoop.fork <agentloop_nb.AgentLoop.fork>`). Errors as for
        :meth:`create`; ``RuntimeError`` too when the factory cannot fork."""
        reject_unknown("fork", unknown, FORK_KEYWORDS)
        alias("fork", "options", options, "agent_options", agent_options)
        factory = self._require_factory("fork")
        fork = getattr(factory, "fork", None)
        if not callable(fork):
            raise UsageError(f"cannot fork an agent: the agent factory {factory!r} has no fork")
        return await _call(
            fork,
            source_session_id,
            at_seq=at_seq,
            session_id=session_id,
            options=options,
            agent_options=agent_options,
            setup=setup,
            signal=signal,
        )

    # -- directory -------------------------------------------------------------------------

    def enter(self, agent: Any) -> Disposer:
        """Publish ``agent`` under ``agent.id``. The disposer removes exactly this object, so a
        stale disposer never removes a later agent that reused the id."""
        agent_id = agent.id
        if agent_id in self._agents:
            raise InvalidValueError(
                f"agent {agent_id!r} already exists; dispose it first or choose another id"
            )
        agents = self._agents
        agents[agent_id] = agent

        def remove() -> None:
            if agents.get(agent_id) is agent:
                del agents[agent_id]

        return Disposer(remove)

    def get(self, agent_id: str) -> Any | None:
        """The live agent with ``agent_id``, or ``None``."""
        return self._agents.get(agent_id)

    def list(self) -> list[Any]:
        """Live agents, in the order they were entered."""
        return list(self._agents.values())

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._agents

    def __len__(self) -> int:
        return len(self._agents)

    # -- initiator -------------------------------------------------------------------------

    @staticmethod
    def current_initiator() -> Any | None:
        """The agent whose driver runs the calling code, or ``None``."""
        return INITIATOR.get()

    @staticmethod
    @contextmanager
    def with_initiator(agent: Any) -> Iterator[Any]:
        """Within the block (and in tasks started from it) ``current_initiator()`` is
        ``agent``; the previous value is restored on exit."""
        token = INITIATOR.set(agent)
        try:
            yield agent
        finally:
            INITIATOR.reset(token)


class _ScopedAgents(BoundView[AgentRegistry]):
    """``ctx.agents`` seen from a non-root context: ``create`` / ``resume`` hand back a handle
    whose agent is disposed when that context's scope is (unless disposed first, which also
    releases the scope's teardown). Everything else is the registry's."""

    __slots__ = ()

    # The parameters are checked by the registry (this view is reached only as ``ctx.agents``,
    # which static checkers see through ``AgentsService``).
    async def create(self, **kwargs: Any) -> AgentHandle:
        """:meth:`AgentRegistry.create`, owned by this context's scope."""
        return await scope_owned(self, await self.service.create(**kwargs))

    async def resume(self, **kwargs: Any) -> AgentHandle:
        """:meth:`AgentRegistry.resume`, owned by this context's scope."""
        return await scope_owned(self, await self.service.resume(**kwargs))

    async def fork(self, source_session_id: str, **kwargs: Any) -> AgentHandle:
        """:meth:`AgentRegistry.fork`, owned by this context's scope."""
        return await scope_owned(self, await self.service.fork(source_session_id, **kwargs))

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self.service

    def __len__(self) -> int:
        return len(self.service)

    def __repr__(self) -> str:
        return f"<AgentRegistry view for {self.ctx!r}>"


async def scope_owned(view: BoundView[Any], handle: AgentHandle) -> AgentHandle:
    """``handle``'s agent, owned by ``view``'s context scope: the returned handle's
    ``dispose`` disposes it and releases the scope's teardown; unwinding the scope first
    disposes it. When the scope is already gone the agent is disposed and the error raised."""
    try:
        release = view.own(lambda: handle.dispose)
    except BaseException:
        # The scope died while the agent was being created: nobody may own it any more.
        await handle.dispose()
        raise
    return AgentHandle(handle.agent, release)


async def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> AgentHandle:
    """Call a factory method with the keywords that were given (not ``None``), under the
    caller's names, and await its answer when it is awaitable."""
    result = method(*args, **{k: v for k, v in kwargs.items() if v is not None})
    handle: AgentHandle = await result if inspect.isawaitable(result) else result
    return handle


def _require_id(door: str, session_id: str | None) -> str:
    if session_id is None:
        raise InvalidTypeError(f"{door}() needs session_id= (the id of the session to {door})")
    return session_id


def current_initiator() -> Any | None:
    """Module-level shortcut for :meth:`AgentRegistry.current_initiator`."""
    return INITIATOR.get()


__all__ = ["AgentFactory", "AgentHandle", "AgentRegistry", "Setup", "current_initiator"]
