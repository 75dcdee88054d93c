"""``AgentLoop`` (``ctx.agent_loop``): creation, resume and teardown of agents (SPEC §4.2)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from ..agents import AgentHandle
from ..hooks import AgentPayload, SessionStartPayload
from ..session import repair
from ._agent import Agent, AgentOptions
from ._config import AgentConfig, AgentLoopConfig, LoopSettings
from ._request import explicit_config

if TYPE_CHECKING:
    from ..context import Context
    from ..session import Session
    from ..signals import AbortSignal

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]
Setup = Callable[["Context"], Awaitable[Any] | Any]


class AgentLoop:
    """Creates, resumes and disposes agents; owns their drivers through ``spawn``.

    Also the ``ctx.agents`` factory: ``await ctx.agents.create(session_id=...)`` and
    ``await ctx.agents.resume(resume_session_id=...)`` land here."""

    def __init__(
        self, ctx: Context, config: AgentLoopConfig | None = None, *, spawn: Spawn
    ) -> None:
        self.ctx = ctx
        self.config = config or AgentLoopConfig()
        self.settings = LoopSettings(max_parallel_tool_calls=self.config.max_parallel_tool_calls)
        self._spawn_fn = spawn
        self._agents: dict[str, Agent] = {}
        self._closed = False
        self._registry_exit: dict[str, Callable[[], Any]] = {}
        ctx.agents.set_factory(_Factory(self))
        sp = ctx.system_prompt
        sp.variable("provider", lambda agent: getattr(agent.options, "provider", None) or "unset")
        sp.variable("model", lambda agent: getattr(agent.options, "model", None) or "unset")
        sp.variable("cwd", lambda agent: agent.session.header.cwd or ".")

    def __bind__(self, ctx: Context) -> AgentLoop | _OwnedAgentLoop:
        """``ctx.agent_loop`` seen from ``ctx``: from the loop's own context, the loop itself
        (it owns its agents); from any other context, a view whose agents are owned by that
        context's scope (disposing it, e.g. re-running a ``%%plugin`` cell, disposes them)."""
        return self if ctx is self.ctx else _OwnedAgentLoop(self, ctx)

    # -- public -------------------------------------------------------------------------------

    def create(
        self, id: str, options: AgentOptions | None = None, meta: dict[str, Any] | None = None
    ) -> Agent:
        """Synchronously create and publish an agent with a fresh session
        ``f"{id}-session-{uuid4()}"``. Raises when a creation listener vetoes."""
        self._require_open()
        session = self.ctx.sessions.prepare(f"{id}-session-{uuid4()}", meta=meta)
        agent = self._build(session, options or AgentOptions())
        self._publish(agent, "startup")
        return agent

    def get(self, id: str) -> Agent | None:
        return self._agents.get(id)

    def list(self) -> list[Agent]:
        return list(self._agents.values())

    async def aclose(self) -> None:
        """Dispose every agent (cancel ``disposed``, drain, unwind), concurrently."""
        self._closed = True
        await asyncio.gather(*(self.dispose(a) for a in list(self._agents.values())))

    async def dispose(self, agent: Agent) -> None:
        """Teardown: cancel ``disposed`` → quiescence → unwind scope → ``agent/disposed`` →
        ``session/disposed``. Idempotent and memoized."""
        fut = agent._disposal  # memoized per agent object: the id may be reused afterwards
        if fut is not None:
            await asyncio.shield(fut)
            return
        fut = agent._disposal = asyncio.get_running_loop().create_future()
        try:
            await agent._dispose()
            await agent.session.flush()
            await agent.ctx.fiber.aclose()
            if self._agents.get(agent.id) is agent:
                del self._agents[agent.id]
            self._registry_exit.pop(agent.id, lambda: None)()
            self.ctx.emit("agent/disposed", AgentPayload(agent))
            self.ctx.sessions.detach(agent.session)
        finally:
            fut.set_result(None)
            owner = agent._owner
            if owner is not None:  # nothing left for the owning scope to tear down
                agent._owner = None
                owner()

    # -- creation transaction ------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("the agent loop is closed (its App was closed); build a new App")

    def _build(self, session: Session, options: AgentOptions, *, resumed: bool = False) -> Agent:
        agent = Agent(self, session, None, options, resumed=resumed)  # type: ignore[arg-type]
        agent.ctx = self.ctx.child(name=f"agent:{session.id}", agent=agent)
        return agent

    def _publish(self, agent: Agent, source: str) -> None:
        """Enter both registries and announce; on any failure roll everything back."""
        self._require_open()
        sessions = self.ctx.sessions
        exit_registry: Callable[[], Any] = lambda: None  # noqa: E731
        entered_session = False
        try:
            exit_registry = self.ctx.agents.enter(agent)  # raises "already exists"
            sessions.enter(agent.session)
            entered_session = True
            self._agents[agent.id] = agent
            agent._published = True
            self.ctx.emit_strict("agent/created", AgentPayload(agent))
            agent.ctx.emit("agent/session-start", SessionStartPayload(agent, source))  # type: ignore[arg-type]
        except BaseException:
            agent._published = False
            agent._disposed = True
            self._agents.pop(agent.id, None)
            exit_registry()
            if entered_session:
                sessions.detach(agent.session)
            agent.ctx.fiber.dispose()
            raise
        self._registry_exit[agent.id] = exit_registry

    async def _create(
        self,
        *,
        session_id: str,
        agent_options: AgentOptions | None = None,
        meta: dict[str, Any] | None = None,
        seed: Any = None,
        setup: Setup | None = None,
        signal: AbortSignal | None = None,
    ) -> AgentHandle:
        self._require_open()
        _check(signal)
        session = self.ctx.sessions.prepare(session_id, meta=meta, seed=seed)
        agent = self._build(session, agent_options or AgentOptions())
        return await self._setup_and_publish(agent, setup, signal, "startup")

    async def _resume(
        self,
        *,
        resume_session_id: str,
        agent_options: AgentOptions | None = None,
        setup: Setup | None = None,
        signal: AbortSignal | None = None,
    ) -> AgentHandle:
        self._require_open()
        _check(signal)
        agent = self._load(resume_session_id, agent_options)
        return await self._setup_and_publish(agent, setup, signal, "resume")

    def _load(self, session_id: str, agent_options: AgentOptions | None) -> Agent:
        persistence = self._persistence()
        header, events = persistence.load(session_id)
        session = self.ctx.sessions.prepare(header=header, events=events)
        repair(session)
        options = agent_options or _options_from_log(session)
        agent = self._build(session, options, resumed=True)
        agent._turn = max(
            (e.data.get("turn", 0) for e in session.events if e.type == "turn/start"), default=0
        )
        agent.inbox._restore(session.events)
        return agent

    def _persistence(self) -> Any:
        try:
            return self.ctx.session_persistence
        except AttributeError:
            raise RuntimeError(
                "cannot resume: session persistence is not configured "
                "(use App(persistence_root=...) or App(persistence=JsonlPersistence(root)))"
            ) from None

    async def _setup_and_publish(
        self, agent: Agent, setup: Setup | None, signal: AbortSignal | None, source: str
    ) -> AgentHandle:
        try:
            if setup is not None:
                result = setup(agent.ctx)
                if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
                    await result
            _check(signal)
        except BaseException:
            agent._disposed = True
            await agent.ctx.fiber.aclose()
            raise
        self._publish(agent, source)
        return AgentHandle(agent, lambda: self.dispose(agent))

    def _start_config_agents(self) -> None:
        for cfg in self.config.agents:
            self._start_config_agent(cfg)

    def _start_config_agent(self, cfg: AgentConfig) -> Agent:
        options = AgentOptions(provider=cfg.provider, model=cfg.model, max_tokens=cfg.max_tokens)
        meta = {"cwd": cfg.cwd} if cfg.cwd else None
        existing = cfg.resume_session_id or cfg.session_id
        if existing is not None and (cfg.resume_session_id or self._persisted(existing)):
            agent = self._load(existing, options)
            self._publish(agent, "resume")
            return agent
        sid = cfg.session_id or f"{cfg.id}-session-{uuid4()}"
        session = self.ctx.sessions.prepare(sid, meta=meta)
        agent = self._build(session, options)
        self._publish(agent, "startup")
        return agent

    def _persisted(self, session_id: str) -> bool:
        try:
            persistence = self.ctx.session_persistence
        except AttributeError:
            return False
        return any(h.id == session_id for h in persistence.list())  # list() -> SessionHeader

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return self._spawn_fn(coro, name)

    @contextlib.contextmanager
    def _initiator(self, agent: Agent) -> Iterator[None]:
        with self.ctx.agents.with_initiator(agent):
            yield


class _OwnedAgentLoop:
    """A view of the :class:`AgentLoop` bound to the context that resolved it."""

    __slots__ = ("_ctx", "_loop")

    def __init__(self, loop: AgentLoop, ctx: Context) -> None:
        self._loop = loop
        self._ctx = ctx

    def create(
        self, id: str, options: AgentOptions | None = None, meta: dict[str, Any] | None = None
    ) -> Agent:
        """:meth:`AgentLoop.create`, with the agent disposed when this context's scope is."""
        agent = self._loop.create(id, options, meta)
        loop = self._loop

        def teardown() -> Any:
            return None if agent._disposal is not None else loop.dispose(agent)

        agent._owner = self._ctx.effect(lambda: teardown)
        return agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def __repr__(self) -> str:
        return f"<AgentLoop view for {self._ctx!r}>"


class _Factory:
    """The ``ctx.agents`` factory seam, backed by the loop."""

    def __init__(self, loop: AgentLoop) -> None:
        self._loop = loop

    async def create(self, **kw: Any) -> AgentHandle:
        return await self._loop._create(**kw)

    async def resume(self, **kw: Any) -> AgentHandle:
        return await self._loop._resume(**kw)


def _check(signal: AbortSignal | None) -> None:
    if signal is not None and signal.aborted:
        raise RuntimeError(f"agent creation aborted: {signal.reason!r}")


def _options_from_log(session: Session) -> AgentOptions:
    # Fields an adapter supplied are not the user's settings: the serving adapter refills them.
    config = explicit_config(session.request_header())
    fields = {k: config[k] for k in ("provider", "model", "max_tokens") if k in config}
    return AgentOptions(**fields)
