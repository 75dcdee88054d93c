"""``AgentLoop`` (``ctx.agent_loop``): creation, resume and teardown of agents.

Every way an agent comes to life (``agent_loop.create`` / ``acreate`` / ``resume`` / ``fork``,
``ctx.agents.create`` / ``resume`` / ``fork``, config-listed agents) runs one :class:`_Creation`
transaction: build a private session, agent and agent scope; optionally await ``setup``; enter
the registries and announce; roll everything back on any failure. Every door speaks one
parameter set (``agentloop_nb._creation``). The directory of live agents is ``ctx.agents``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import operator
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Never, Protocol
from uuid import uuid4

from .._creation import (
    CREATE_KEYWORDS,
    FORK_KEYWORDS,
    RESUME_KEYWORDS,
    SYNC_CREATE_KEYWORDS,
    AgentOptions,
    alias,
    reject_unknown,
)
from .._event_names import TURN_START
from .._hook_names import AGENT_CREATED, AGENT_DISPOSED, AGENT_SESSION_START
from .._scoped import BoundView
from ..agents import AgentHandle, Setup, scope_owned
from ..errors import InvalidTypeError, UsageError
from ..hooks import AgentPayload, SessionStartPayload
from ..session import PersistenceError
from ..signals import AbortController, AbortScope
from ._config import AgentConfig, AgentLoopConfig, live_settings
from ._limits import GlobalLimits
from ._prompt_vars import configured_model, configured_provider, shared_cwd

if TYPE_CHECKING:
    from .._disposer import Disposer
    from ..context import Context
    from ..session import Session
    from ..signals import AbortSignal
    from ._agent import Agent
    from ._driver import Driver, Spawn

# The agent itself (``Agent``, its driver, inbox, turn state and request path, and through the
# driver the tool scheduler and its pool) loads with the first agent a loop creates, not with
# ``import agentloop_nb`` or ``App()``: a program (or a kernel after ``%load_ext``) that has
# not made an agent yet needs none of it (start-up cost; docs/architecture.md).
_AGENT_MODULE = f"{__package__}._agent"

_log = logging.getLogger("agentloop_nb")


# An annotation only (a protocol class costs its creation at import): type checkers see it.
if TYPE_CHECKING:

    class Lease(Protocol):
        """A persistence backend's writer reservation (``persistence.acquire(id)``)."""

        def release(self) -> None: ...


class _Life:
    """The loop's bookkeeping for one published agent (not a directory: lookups by id go
    through ``ctx.agents``). A plain slotted class: no dataclass code generated at import."""

    __slots__ = ("agent", "disposal", "driver", "leave", "owner")

    def __init__(self, agent: Agent, driver: Driver, leave: Callable[[], Any]) -> None:
        self.agent = agent
        self.driver = driver
        self.leave = leave  # removes the agent from ``ctx.agents``
        self.owner: Disposer | None = None  # the owning scope's effect, when not the loop's own
        self.disposal: asyncio.Future[None] | None = None


class AgentLoop:
    """Creates, resumes and disposes agents; owns their drivers through ``spawn``.

    Doors: the synchronous :meth:`create` (the notebook convenience: no ``await``, a minted
    session id) and the async :meth:`acreate`, :meth:`resume` and :meth:`fork` (an exact session
    id, ``setup``, ``signal``; they answer an :class:`AgentHandle`). ``ctx.agents.create`` /
    ``resume`` / ``fork`` land on the async ones (the loop is the registry's factory)."""

    def __init__(
        self, ctx: Context, config: AgentLoopConfig | None = None, *, spawn: Spawn
    ) -> None:
        self.ctx = ctx
        self.config = config or AgentLoopConfig()
        self.settings = live_settings(self.config)
        #: Gates shared by every agent, capped by the live ``settings``' global limits.
        self.limits = GlobalLimits(self.settings)
        self._spawn = spawn
        self._lives: dict[Agent, _Life] = {}
        self._inflight: dict[AbortController, asyncio.Future[None]] = {}
        self._closed = False
        self._directory = ctx.agents  # kept: it outlives the root's services at App teardown
        self._directory.set_factory(_Factory(self))
        sp = ctx.system_prompt
        # Rendered per request from the effective config (see ``effective_assembly``).
        sp.variable("provider", configured_provider)
        sp.variable("model", configured_model)
        sp.variable("cwd", shared_cwd)

    def __bind__(self, ctx: Context) -> AgentLoop | _OwnedAgentLoop:
        """``ctx.agent_loop`` seen from ``ctx``: from the loop's own context, the loop itself
        (it owns its agents); from any other context, a view whose agents are owned by that
        context's scope (disposing it, e.g. re-running a ``%%plugin`` cell, disposes them)."""
        return self if ctx is self.ctx else _OwnedAgentLoop(self, ctx)

    # -- public -------------------------------------------------------------------------------

    def create(
        self,
        id: str,
        options: AgentOptions | None = None,
        meta: Mapping[str, Any] | None = None,
        *,
        agent_options: AgentOptions | None = None,
        **unknown: Never,
    ) -> Agent:
        """The notebook convenience: synchronously create and publish an agent (no ``await``,
        no running event loop needed) with a fresh session ``f"{id}-session-{uuid4()}"``.
        For an exact session id, a ``setup`` or a ``signal``, use :meth:`acreate`.
        ``agent_options=`` is an alias of ``options=``. Raises when a creation listener vetoes
        (nothing is published), ``RuntimeError`` once the App is closed, ``TypeError`` for an
        unknown keyword."""
        reject_unknown("create", unknown, SYNC_CREATE_KEYWORDS)
        options = alias("create", "options", options, "agent_options", agent_options)
        return self._create_now(id, options, meta, owner=None)

    async def acreate(
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
        """Create an agent on a new session with exactly ``session_id`` (the async door that
        ``ctx.agents.create`` lands on). ``seed`` items are appended to the new log first;
        ``setup(agent.ctx)`` is awaited before publication; ``signal`` aborts the creation
        (``AbortError``). Any failure publishes nothing and frees the id; ``already exists``
        when the id is live. ``agent_options=`` is an alias of ``options=``."""
        reject_unknown("acreate", unknown, CREATE_KEYWORDS)
        options = alias("acreate", "options", options, "agent_options", agent_options)
        return await self._open(session_id, options, meta, seed, setup, signal)

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
        """Resume the persisted session ``session_id`` (alias ``resume_session_id=``): take
        its writer lock, load and repair the log, continue its turn numbering. ``options``
        default to the log's last request header. ``RuntimeError`` without persistence;
        ``SessionNotFoundError`` for an unknown id; otherwise as :meth:`acreate`."""
        reject_unknown("resume", unknown, RESUME_KEYWORDS)
        options = alias("resume", "options", options, "agent_options", agent_options)
        sid = alias("resume", "session_id", session_id, "resume_session_id", resume_session_id)
        if sid is None:
            raise InvalidTypeError("resume() needs session_id= (the id of the persisted session)")
        self._require_open()
        _check(signal)
        creation = self._load(sid, options)
        return await self._setup_and_publish(creation, setup, signal, "resume")

    def get(self, id: str) -> Agent | None:
        agent = self._directory.get(id)
        cls = _agent_class()
        return agent if cls is not None and isinstance(agent, cls) else None

    def list(self) -> list[Agent]:
        cls = _agent_class()
        return [] if cls is None else [a for a in self._directory.list() if isinstance(a, cls)]

    def start_config_agents(self) -> None:
        """Create (or resume) every agent listed in the configuration, in order."""
        for cfg in self.config.agents:
            self._start_config_agent(cfg)

    async def aclose(self) -> None:
        """Refuse new agents, abort the creates/resumes in flight and wait for them to roll
        back, then dispose every agent (cancel ``disposed``, drain, unwind), concurrently."""
        self._closed = True
        for controller in list(self._inflight):
            controller.abort({"kind": "disposed"})
        if self._inflight:
            await asyncio.wait(list(self._inflight.values()))
        await asyncio.gather(*(self.dispose(a) for a in list(self._lives)))

    async def dispose(self, agent: Agent) -> None:
        """Teardown: cancel ``disposed`` → quiescence (the driver task has ended) → unwind the
        agent scope → ``agent/disposed`` → ``session/disposed``. Idempotent and memoized per
        agent object (the id may be reused afterwards)."""
        life = self._lives.get(agent)
        if life is None:
            return  # never published by this loop, or already disposed
        if life.disposal is not None:
            await asyncio.shield(life.disposal)
            return
        fut = life.disposal = asyncio.get_running_loop().create_future()
        try:
            await life.driver.dispose()
            await _final_flush(agent)
            await agent.ctx.fiber.aclose()
            life.leave()
            self.ctx.emit(AGENT_DISPOSED, AgentPayload(agent))
            self.ctx.sessions.detach(agent.session)
        finally:
            del self._lives[agent]
            fut.set_result(None)
            owner, life.owner = life.owner, None
            if owner is not None:  # nothing left for the owning scope to tear down
                owner()

    # -- creation -----------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise UsageError("the agent loop is closed (its App was closed); build a new App")

    def _create_now(
        self,
        id: str,
        options: AgentOptions | None,
        meta: Mapping[str, Any] | None,
        *,
        owner: Context | None,
    ) -> Agent:
        self._require_open()
        session = self.ctx.sessions.prepare(f"{id}-session-{uuid4()}", meta=meta)
        creation = _Creation(self, session, options or AgentOptions())
        return creation.publish("startup", owner)

    async def _open(
        self,
        session_id: str,
        options: AgentOptions | None,
        meta: Mapping[str, Any] | None,
        seed: Iterable[Any] | None,
        setup: Setup | None,
        signal: AbortSignal | None,
    ) -> AgentHandle:
        self._require_open()
        _check(signal)
        session = self.ctx.sessions.prepare(session_id, meta=meta, seed=seed)
        creation = _Creation(self, session, options or AgentOptions())
        return await self._setup_and_publish(creation, setup, signal, "startup")

    async def _setup_and_publish(
        self, creation: _Creation, setup: Setup | None, signal: AbortSignal | None, source: str
    ) -> AgentHandle:
        # One controller per creation: the caller's signal and App.aclose both abort it.
        controller = AbortController()
        off = signal.add_callback(controller.abort) if signal is not None else None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight[controller] = done
        try:
            await creation.setup(setup, controller.signal)
            agent = creation.publish(source, None)
        finally:
            del self._inflight[controller]
            done.set_result(None)
            if off is not None:
                off()
        return AgentHandle(agent, lambda: self.dispose(agent))

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
        """Create an agent on a new session seeded with ``source_session_id``'s surface history
        up to event ``at_seq`` (default: all); header meta ``forked_from`` / ``at_seq`` /
        ``cut_seq``. A cut inside a step never separates a tool call from its result (see
        ``loop._fork``). The source (live, or stored and loaded read-only) is never changed.
        Options default to the live source agent's, else the source log's last header.
        Raises ``ValueError`` for a bad ``at_seq``, ``RuntimeError`` or the persistence errors
        (``SessionNotFoundError``) for a session that is neither live nor stored, and whatever
        a creation raises (``already exists``, ``AbortError``, a vetoing listener).
        ``agent_options=`` is an alias of ``options=``."""
        reject_unknown("fork", unknown, FORK_KEYWORDS)
        options = alias("fork", "options", options, "agent_options", agent_options)
        self._require_open()
        _check(signal)
        live = self.ctx.sessions.get(source_session_id)
        if live is not None:
            header, events = live.header, list(live.events)
        else:
            header, events = self._persistence().load(source_session_id)
        from ._fork import plan_fork  # lazily, like the repair below: only forks need it

        plan = plan_fork(header, events, at_seq, session_id)
        if options is None:
            options = self._source_options(source_session_id, header, events)
        return await self._open(plan.session_id, options, plan.meta, plan.seed, setup, signal)

    def _source_options(self, source_id: str, header: Any, events: Any) -> AgentOptions:
        for agent in self._lives:
            if agent.session.id == source_id:
                return agent.options
        return _options_from_log(self.ctx.sessions.prepare(header=header, events=events))

    def _load(self, session_id: str, options: AgentOptions | None) -> _Creation:
        """Reserve the session's writer lock (when the backend has one), then load it. The
        lease is given back when anything fails before publication (here, in setup or in
        publish); publication adopts it and disposal releases it."""
        from ..session import repair  # lazily: the import builds no resume path

        persistence = self._persistence()
        acquire = getattr(persistence, "acquire", None)
        lease: Lease | None = None if acquire is None else acquire(session_id)
        try:
            header, events = persistence.load(session_id)
            session = self.ctx.sessions.prepare(header=header, events=events)
            repair(session)
            creation = _Creation(self, session, options or _options_from_log(session), resumed=True)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        creation.lease = lease
        return creation

    def _persistence(self) -> Any:
        try:
            return self.ctx.session_persistence
        except AttributeError:
            raise UsageError(
                "cannot resume: session persistence is not configured "
                "(use App(persistence_root=...) or App(persistence=JsonlPersistence(root)))"
            ) from None

    def _start_config_agent(self, cfg: AgentConfig) -> Agent:
        self._require_open()
        options = cfg.options
        meta = {"cwd": cfg.cwd} if cfg.cwd else None
        existing = cfg.resume_session_id or cfg.session_id
        if existing is not None and (cfg.resume_session_id or self._persisted(existing)):
            return self._load(existing, options).publish("resume", None)
        sid = cfg.session_id or f"{cfg.id}-session-{uuid4()}"
        session = self.ctx.sessions.prepare(sid, meta=meta)
        return _Creation(self, session, options).publish("startup", None)

    def _persisted(self, session_id: str) -> bool:
        try:
            persistence = self.ctx.session_persistence
        except AttributeError:
            return False
        return any(h.id == session_id for h in persistence.list())  # list() -> SessionHeader


class _Creation:
    """One creation or resume transaction. ``setup`` (optional, async) then ``publish``; both
    roll the whole creation back (scope unwound, registries left, id freed) when they fail."""

    def __init__(
        self, loop: AgentLoop, session: Session, options: AgentOptions, *, resumed: bool = False
    ) -> None:
        # Loaded with the first creation (see ``_AGENT_MODULE``); already loaded after it.
        from ._agent import Agent
        from ._driver import Driver
        from ._inbox import Inbox
        from ._request import RequestPath
        from ._state import TurnState

        self.loop = loop
        self.lease: Lease | None = None  # a resume's writer reservation, until publication
        # Continue the turn numbering of the log (a resumed one, or a seed that holds turns):
        # a new turn must not reuse a logged turn's number.
        turn = max(
            (e.data.get("turn", 0) for e in session.events if e.type == TURN_START), default=0
        )
        self.state = state = TurnState(turn=turn, resumed=resumed)
        self.driver = driver = Driver(state, loop._spawn)
        inbox = Inbox(session, driver.notify_inbox)
        if resumed:
            inbox.restore(session.events)
        root = loop.ctx
        self.agent = Agent(
            session,
            options,
            inbox,
            state,
            scope=lambda agent: root.child(name=f"agent:{session.id}", agent=agent),
            start=driver.start,
        )
        driver.bind(self.agent)
        state.attach_requests(RequestPath(self.agent, resumed=resumed))

    async def setup(self, setup: Setup | None, signal: AbortSignal) -> None:
        """Await ``setup(agent.ctx)`` under ``signal``. Raises ``AbortError`` when the signal
        aborts (before, during: the setup is cancelled, or after it); any failure rolls back."""
        agent = self.agent
        try:
            if setup is not None:
                with AbortScope(signal):
                    result = setup(agent.ctx)
                    if inspect.isawaitable(result):
                        await result
            signal.throw_if_aborted()
        except BaseException:
            self.state.mark_disposed()
            self.release_lease()
            await agent.ctx.fiber.aclose()
            raise

    def release_lease(self) -> None:
        """Give back a resume's writer reservation (a no-op once the session is attached)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()

    def publish(self, source: str, owner: Context | None) -> Agent:
        """Enter both registries and announce (``session/created``, ``agent/created``,
        ``agent/session-start``); on any failure roll everything back and re-raise."""
        loop, agent, state = self.loop, self.agent, self.state
        ctx = loop.ctx
        sessions = ctx.sessions
        leave: Callable[[], Any] = lambda: None  # noqa: E731
        entered_session = False
        try:
            loop._require_open()
            leave = loop._directory.enter(agent)  # raises "already exists"
            sessions.enter(agent.session)
            entered_session = True
            state.publish()
            life = loop._lives[agent] = _Life(agent, self.driver, leave)
            ctx.emit_strict(AGENT_CREATED, AgentPayload(agent))
            agent.ctx.emit(AGENT_SESSION_START, SessionStartPayload(agent, source))  # type: ignore[arg-type]
        except BaseException:
            state.withdraw()
            loop._lives.pop(agent, None)
            leave()
            if entered_session:
                sessions.detach(agent.session)
            self.release_lease()
            agent.ctx.fiber.dispose()
            raise
        self.lease = None  # adopted by the attached session; its disposal releases the lock
        if owner is not None:
            life.owner = owner.effect(lambda: lambda: _owned_teardown(loop, agent))
        return agent


def _agent_class() -> type[Agent] | None:
    """``Agent``, or ``None`` while its module is not loaded: then no agent exists yet (an
    object cannot be an instance of a class not yet made), so nothing in a directory is one."""
    module = sys.modules.get(_AGENT_MODULE)
    return None if module is None else module.Agent


def _owned_teardown(loop: AgentLoop, agent: Agent) -> Awaitable[None] | None:
    """What an owning scope runs on unwind: dispose the agent unless that already started."""
    life = loop._lives.get(agent)
    return loop.dispose(agent) if life is not None and life.disposal is None else None


class _OwnedAgentLoop(BoundView["AgentLoop"]):
    """A view of the :class:`AgentLoop` bound to the context that resolved it: agents created
    through it are disposed when that context's scope is."""

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def limits(self) -> GlobalLimits:
            """:attr:`AgentLoop.limits`."""
    else:
        # Read by every step: a property spares the delegation through ``__getattr__`` (which
        # first builds and drops an ``AttributeError``), and a C-level getter its frame.
        limits = property(operator.attrgetter("service.limits"), doc=":attr:`AgentLoop.limits`.")

    def create(
        self,
        id: str,
        options: AgentOptions | None = None,
        meta: Mapping[str, Any] | None = None,
        *,
        agent_options: AgentOptions | None = None,
        **unknown: Never,
    ) -> Agent:
        """:meth:`AgentLoop.create`, with the agent disposed when this context's scope is."""
        reject_unknown("create", unknown, SYNC_CREATE_KEYWORDS)
        options = alias("create", "options", options, "agent_options", agent_options)
        return self.service._create_now(id, options, meta, owner=self.ctx)

    # The parameters are checked by the loop (static checkers see this view through
    # ``AgentLoopService``).
    async def acreate(self, **kwargs: Any) -> AgentHandle:
        """:meth:`AgentLoop.acreate`, owned by this context's scope."""
        return await scope_owned(self, await self.service.acreate(**kwargs))

    async def resume(self, **kwargs: Any) -> AgentHandle:
        """:meth:`AgentLoop.resume`, owned by this context's scope."""
        return await scope_owned(self, await self.service.resume(**kwargs))

    async def fork(self, source_session_id: str, **kwargs: Any) -> AgentHandle:
        """:meth:`AgentLoop.fork`, owned by this context's scope."""
        return await scope_owned(self, await self.service.fork(source_session_id, **kwargs))

    def __repr__(self) -> str:
        return f"<AgentLoop view for {self.ctx!r}>"


class _Factory:
    """The ``ctx.agents`` factory seam, backed by the loop: its methods are the loop's typed
    async doors themselves (``create`` is :meth:`AgentLoop.acreate`, because the loop's own
    ``create`` is the synchronous notebook convenience)."""

    __slots__ = ("create", "fork", "resume")

    def __init__(self, loop: AgentLoop) -> None:
        self.create = loop.acreate
        self.resume = loop.resume
        self.fork = loop.fork

    def __repr__(self) -> str:
        return "<agent loop factory>"


async def _final_flush(agent: Agent) -> None:
    """The disposal flush. A ``PersistenceError`` is logged, never raised: the turn that met
    it already ended ``error`` and reported it, and disposal must still unwind the agent and
    detach its session (which gives the session's writer lock back)."""
    try:
        await agent.session.flush()
    except* PersistenceError as group:
        _log.warning("agent %r: its session could not be written: %s", agent.id, group)


def _check(signal: AbortSignal | None) -> None:
    if signal is not None:
        signal.throw_if_aborted()


def _options_from_log(session: Session) -> AgentOptions:
    """The agent options a resumed session continues with: every generation setting its last
    ``request/header`` logged (provider, model, max tokens, temperature, reasoning effort),
    except the fields an adapter supplied (the serving adapter refills those)."""
    from ._request import explicit_config  # a resume or fork: the first agent loaded it

    config = explicit_config(session.request_header())
    return AgentOptions(**{k: v for k, v in config.items() if k in AgentOptions.model_fields})
