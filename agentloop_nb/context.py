"""``Context``: the plugin/service container and event bus; ``Fiber``: the scope that owns
registrations.

One root ``Context()`` per application. ``ctx.child()`` and ``ctx.plugin()`` derive contexts
whose scopes nest under their parent's; disposing a scope unwinds everything registered
through it (listeners, services, effects, child scopes) in reverse order.

Dispatch modes (every handler receives exactly one payload object):

- ``emit`` — sync notification; listener exceptions are contained, logged on the
  ``agentloop_nb.context`` logger and re-emitted as ``internal/error`` with an
  :class:`ErrorReport` (never recursively). An async listener's awaitable is run as a task owned
  by the listener's scope (cancelled when that scope disposes); its failure is reported the same
  way. Without a running loop the awaitable is closed and reported.
- ``emit_strict`` — like ``emit`` but the first sync exception propagates (vetoes); async
  listeners are scheduled as under ``emit`` and cannot veto.
- ``await parallel`` — all listeners at once; after all settle, failures raise one
  ``ExceptionGroup``.
- ``await serial`` — in order, each awaited; the first non-``None`` return wins and the
  remaining listeners are skipped; exceptions propagate.
- ``bail`` — the synchronous ``serial``: the first non-``None`` return wins and exceptions
  propagate (they are not contained as under ``emit``); an async listener is a ``TypeError``.
- ``await waterfall`` — middleware: ``handler(payload, next)``; ``await next()`` runs the rest
  of the chain and finally ``default()``; not calling ``next`` short-circuits.

Every mode iterates the listener tuple as it was when the dispatch started (storage is
copy-on-write), skipping listeners disposed meanwhile; a listener added mid-dispatch is not
called by that dispatch. A dispatch that reaches no listener is about as cheap as asking
:meth:`Context.has_listeners` first, so call sites simply dispatch.

``serial`` and ``waterfall`` accept ``signal=``: the dispatch then runs under an
:class:`~agentloop_nb.signals.AbortScope` (an abort interrupts a listener that ignores the signal
and the call raises :class:`~agentloop_nb.signals.AbortError`), but only when a listener is
reached; an unobserved ``waterfall`` just returns ``default()``. Every mode accepts a
:class:`Lazy` payload (``Lazy(factory, *args)``), built only when a listener is reached.

The implementation is split by concern: the bus (``_bus``), services (``_services``, with the
registry/binding helpers in ``_scoped``), plugins (``_plugins``) and scopes (``_fiber``); this
module keeps the public face.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable, Coroutine, KeysView
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ._bus import EVERY_NAME, INTERNAL_ERROR, Bus, Handler, Lazy, listened
from ._disposer import Disposer
from ._fiber import Fiber, InactiveContextError, close_unstarted, is_awaitable
from ._hook_names import CATALOGUED
from ._plugins import (
    PluginError,
    check_inject,
    plugin_name,
    remember,
    replace_named,
    run_apply,
    validate_config,
)
from ._services import MISSING, CoreHolder, Generation, Layer, Resolver, check_name, publish
from .errors import InvalidTypeError
from .signals import AbortError

if TYPE_CHECKING:
    from ._error_report import ErrorReport
    from ._service_types import (
        AgentLoopService,
        AgentsService,
        LlmService,
        SessionsService,
        SystemPromptService,
        ToolsService,
    )
    from .signals import AbortSignal


class Emit(Protocol):
    """The type of :attr:`Context.emit`."""

    def __call__(self, name: str, payload: Any = None) -> None: ...


@functools.cache
def _near_miss(name: str) -> str | None:
    """The catalogued hook name ``name`` was probably meant to be, or ``None`` (once per
    distinct name: listeners are registered per cell run, not per step)."""
    import difflib  # here: only a miss needs it (2.5 M instructions to import)

    close = difflib.get_close_matches(name, CATALOGUED, n=1, cutoff=0.85)
    return close[0] if close else None


_CORE_SERVICES = frozenset({"tools", "llm", "sessions", "system_prompt", "agents", "agent_loop"})


def _core_service(name: str) -> property:
    """``Context.<name>`` for a core service: what ``ctx._service(name)`` answered in the
    current generation, kept in the context's :class:`CoreHolder` and read by a C-level
    getter, so a read is no Python frame at all (docs/architecture.md "Step, session 16"):
    the loop reads these a few times a step. A name the holder lacks (not read yet in this
    generation, or no such service) raises ``AttributeError`` in the getter, which sends the
    lookup to ``__getattr__``: ``_service`` resolves it (and keeps it) or raises."""
    return property(
        operator.attrgetter(f"_core.{name}"),
        doc=f"The ``{name}`` service as this context sees it.",
    )


class _Tree:
    """State shared by every context of one tree: the bus and the services generation."""

    __slots__ = ("bus", "gen")

    def __init__(self) -> None:
        self.bus = Bus()
        self.gen = Generation()


class Context:
    """Plugin/service container and event bus. ``Context()`` makes a root.

    Attributes: ``fiber`` (its scope), ``parent`` (``None`` for the root), ``root``, ``agent``
    (the agent this context is scoped to, inherited by children; ``None`` outside agents),
    ``name``, ``active``. Any other public attribute resolves a service (see :meth:`provide`);
    the core services (``tools``, ``llm``, ``sessions``, ``system_prompt``, ``agents``,
    ``agent_loop``) are typed for static checkers.
    """

    __slots__ = (
        "_bus",
        "_core",
        "_layer",
        "_named",
        "_resolver",
        "_tree",
        "agent",
        "emit",
        "fiber",
        "listened",
        "name",
        "parent",
        "root",
    )

    if TYPE_CHECKING:
        tools: ToolsService
        llm: LlmService
        sessions: SessionsService
        system_prompt: SystemPromptService
        agents: AgentsService
        agent_loop: AgentLoopService

        @property
        def service_generation(self) -> int:
            """Changes whenever a service is provided or withdrawn in this tree (below)."""
    else:
        # The core services are properties: a name that normal lookup misses costs an
        # ``AttributeError`` built and discarded before ``__getattr__`` runs (CPython 3.11),
        # about a microsecond, and the loop resolves a few of these every step.
        tools = _core_service("tools")
        llm = _core_service("llm")
        sessions = _core_service("sessions")
        system_prompt = _core_service("system_prompt")
        agents = _core_service("agents")
        agent_loop = _core_service("agent_loop")
        # C-level, like the services above: a hot path compares it once a step.
        service_generation = property(
            operator.attrgetter("_tree.gen.value"),
            doc="A number that changes whenever a service is provided or withdrawn anywhere "
            "in this context's tree. While it is unchanged, ``ctx.NAME`` answers what it "
            "answered before: a hot path may keep the services it resolved and resolve them "
            "again only when this changes.",
        )

    _tree: _Tree
    _bus: Bus
    _core: CoreHolder
    _layer: Layer
    _named: dict[str, Fiber]
    _resolver: Resolver
    agent: Any
    emit: Emit
    """``emit(name, payload=None)``: notify listeners synchronously; their exceptions are
    contained and reported (the bus's own dispatch, bound to this context's agent)."""
    fiber: Fiber
    listened: KeysView[str]
    """The names some listener is registered for anywhere in this context's tree, as a live
    read-only view: what :func:`listened` answers for a context (``NAME in listened(ctx)``,
    the one "does anyone listen" test; agent scopes are not applied: use
    :meth:`has_listeners` for that). Lets a hot call site skip even the dispatch call (and
    building its payload and default) while nobody listens: the loop tests it before each
    hook of a step, the session log before each append's ``session/event``."""
    name: str
    parent: Context | None
    root: Context

    def __init__(self, *, name: str = "root") -> None:
        self._setup(_Tree(), Layer(None), None, None, Fiber(name, report=self._report))

    def _setup(
        self, tree: _Tree, layer: Layer, parent: Context | None, agent: object, fiber: Fiber
    ) -> None:
        self._tree = tree
        self._bus = tree.bus
        self._core = CoreHolder()
        self._layer = layer
        self._named = {}
        self._resolver = Resolver()
        self.agent = agent
        self.emit = partial(tree.bus.emit, agent)
        self.fiber = fiber
        self.listened = tree.bus.listeners.keys()  # live: one view serves every check
        self.name = fiber.name
        self.parent = parent
        self.root = self if parent is None else parent.root

    def _derive(self, name: str, agent: object, layer: Layer) -> Context:
        self.fiber.check_active("derive a context")
        ctx = object.__new__(Context)
        fiber = Fiber(name, self.fiber, report=ctx._report)
        ctx._setup(self._tree, layer, self, agent, fiber)
        return ctx

    def _report(self, name: str, handler: object, exc: Exception) -> None:
        self._bus.report(name, handler, exc, self.agent)

    @property
    def active(self) -> bool:
        return self.fiber.active

    def child(self, *, name: str | None = None, agent: object = None) -> Context:
        """A child context with its own scope (nested in this one) and its own service layer.

        ``agent`` scopes it to an agent; when ``None`` the parent's agent is inherited.
        Raises :class:`InactiveContextError` if this context was disposed.
        """
        return self._derive(
            name or "child", self.agent if agent is None else agent, Layer(self._layer)
        )

    # -- services ---------------------------------------------------------------------------

    def provide(self, name: str, service: Any) -> Disposer:
        """Publish ``service`` as ``ctx.<name>`` for this context and its descendants (a plugin
        context publishes into its parent's layer, so siblings see it too).

        If the service defines ``__bind__(self, ctx)``, each context resolving it gets (and
        caches) ``service.__bind__(ctx)`` instead: a view that owns registrations in that
        context's scope. Raises ``ValueError`` for an invalid or already provided name (in the
        same layer; a child layer may shadow) and :class:`InactiveContextError` when disposed.
        """
        self.fiber.check_active("provide a service")
        check_name(name, lambda n: hasattr(Context, n) and n not in _CORE_SERVICES)
        return self.fiber.own(publish(self._layer, self._tree.gen, name, service))

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails, i.e. for services other than the core ones
        # (and for a missing core service, after its property raised).
        if name[:1] == "_":  # never a service (and the fields below may not exist yet)
            raise AttributeError(name)
        return self._service(name)

    def _service(self, name: str) -> Any:
        """The service ``name`` as this context sees it: a cached answer of the current
        generation, else resolved up the layers. ``AttributeError`` naming the context when
        nobody provides it."""
        entry = self._resolver.cache.get(name)
        gen = self._tree.gen
        current = gen.value
        if entry is not None and entry[0] == current:
            value = entry[2]
        else:
            value = self._resolver.resolve(self._layer, gen, name, self)
            if value is MISSING:
                raise AttributeError(
                    f"context {self.fiber.path!r} has no service {name!r}; provide it with "
                    f"ctx.provide({name!r}, obj) or apply the plugin that provides it"
                )
        if name in _CORE_SERVICES:  # read without this frame until the next bump
            gen.keep(self._core, name, value, current)
        return value

    # -- registration -----------------------------------------------------------------------

    def on(
        self,
        name: str,
        handler: Handler,
        *,
        prepend: bool = False,
        passes: Callable[[Any], bool] | None = None,
    ) -> Disposer:
        """Listen to ``name``; the listener is owned by this context's scope and remembers its
        agent for scope filtering. ``prepend`` puts it first. Raises
        :class:`InactiveContextError` when this context was disposed. A ``name`` that is not
        a catalogued hook but nearly is one (``"tools/pre-exec"``) warns, naming the hook
        meant: such a listener would silently never run.

        ``passes`` (waterfall listeners only): ``passes(agent)``, asked before each waterfall
        dispatch reaches the listener with the dispatching context's agent (``None`` outside
        agents), answers true when calling the listener would do nothing but pass the
        dispatch on (``return next()``); the chain then steps over it without calling it or
        building the payload for it. It must not raise, and must answer false whenever the
        listener could do anything else."""
        if name not in CATALOGUED and (meant := _near_miss(name)) is not None:
            warnings.warn(
                f"ctx.on({name!r}): no hook has this name; did you mean {meant!r}? "
                "(a listener on an unknown name never runs)",
                UserWarning,
                stacklevel=2,
            )
        return self._bus.add(name, handler, handler, self.agent, self.fiber, prepend, passes)

    def once(self, name: str, handler: Handler) -> Disposer:
        """Like :meth:`on`, but the listener disposes itself just before its first call."""

        def fire(*args: Any) -> Any:
            disposer()
            return handler(*args)

        disposer = self._bus.add(name, fire, handler, self.agent, self.fiber, False)
        return disposer

    def effect(self, setup: Callable[[], Any]) -> Disposer:
        """Run ``setup()`` now; its return value (a callable, e.g. a :class:`Disposer`, or
        ``None``) is the teardown, run when the returned disposer is called or the scope
        disposes (reverse registration order). A teardown may return an awaitable (see
        :meth:`Fiber.aclose`). ``setup`` exceptions propagate and register nothing; an async
        ``setup`` or a non-callable return value raises ``TypeError``."""
        self.fiber.check_active("register an effect")
        teardown = setup()
        if teardown is None:
            return Disposer()
        if is_awaitable(teardown) or not callable(teardown):
            close_unstarted((teardown,))
            raise InvalidTypeError(
                f"effect setup {setup!r} must synchronously return a teardown callable or "
                f"None, got {type(teardown).__name__}"
            )
        if not self.fiber.active:  # setup disposed its own scope: undo right away
            teardown()
            self.fiber.check_active("register an effect")
        return self.fiber.own(teardown)

    def plugin(self, plugin: Any, config: Any = None, *, name: str | None = None) -> Fiber:
        """Apply ``plugin`` on a child context with its own scope and return that scope.

        ``plugin`` is ``apply(ctx, config)`` or a class ``__init__(self, ctx, config)``
        (its instance becomes ``fiber.instance``; an instance ``dispose()`` runs first when the
        scope disposes). Optional plugin attributes: ``name`` (or the ``name=`` argument),
        ``inject`` (service names that must resolve, else :class:`PluginError` naming the
        missing one) and ``Config`` (a pydantic model: ``None``/dict config is validated first;
        ``ValidationError`` propagates with nothing registered).

        A named plugin replaces a live plugin of the same name applied through this context:
        the old scope is disposed before the new one is applied (checks run before that, so a
        bad config leaves the old one live). If ``apply`` raises, everything it registered is
        disposed and the error propagates; an ``apply`` returning an awaitable is a
        ``TypeError`` (apply must be synchronous; start async work with ``ctx.effect``).
        """
        self.fiber.check_active("apply a plugin")
        if not callable(plugin):
            raise InvalidTypeError(f"a plugin must be a function or a class, got {plugin!r}")
        name, label = plugin_name(plugin, name)
        config = validate_config(plugin, config)
        layer = self._layer
        check_inject(plugin, label, self.fiber.path, lambda s: layer.find(s) is not MISSING)
        replace_named(self._named, name)
        ctx = self._derive(label, self.agent, layer)
        ctx.fiber.config = config
        if name is not None:
            remember(self._named, name, ctx.fiber)
        run_apply(plugin, ctx, config, label)
        return ctx.fiber

    # -- dispatch ---------------------------------------------------------------------------

    def has_listeners(self, name: str) -> bool:
        """Whether a dispatch of ``name`` through this context would reach any listener.

        Dispatching an unobserved name is cheap already; this is for callers that want to skip
        work of their own (e.g. building an expensive payload)."""
        if name not in self.listened:
            return False
        return self._bus.has_listeners(name, self.agent)

    def emit_strict(self, name: str, payload: Any = None) -> None:
        """Notify listeners synchronously; the first exception propagates (a veto) and the
        remaining listeners are not called. Async listeners run as under :attr:`emit`."""
        self._bus.emit_strict(name, payload, self.agent)

    async def parallel(self, name: str, payload: Any = None) -> None:
        """Run all listeners concurrently; once every one settled, raise an
        ``ExceptionGroup`` of the failures (if any). Cancellation cancels them all."""
        await self._bus.parallel(name, payload, self.agent)

    async def serial(
        self, name: str, payload: Any = None, *, signal: AbortSignal | None = None
    ) -> Any:
        """Run listeners in order, awaiting each; return the first non-``None`` result
        (later listeners are skipped) or ``None``. Exceptions propagate.

        With ``signal``: raises :class:`~agentloop_nb.signals.AbortError` when it is aborted
        already, and a reached listener runs under an abort scope (an abort cancels it and the
        call raises ``AbortError``; see :mod:`agentloop_nb.signals`)."""
        # fast path (benchmarks/bench_bus.py "unobserved serial"): no coroutine, no scope
        if name not in self.listened:
            if signal is not None and signal.aborted:
                raise AbortError(signal.reason)
            return None
        return await self._bus.serial(name, payload, self.agent, signal)

    def bail(self, name: str, payload: Any = None) -> Any:
        """Synchronous :meth:`serial`: the first non-``None`` return wins. An async listener
        raises ``TypeError``."""
        return self._bus.bail(name, payload, self.agent)

    def waterfall(
        self,
        name: str,
        payload: Any,
        default: Callable[[], Any] | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Middleware chain: each listener is called as ``handler(payload, next)`` where
        ``await next()`` runs the rest of the chain; after the last listener ``default()``
        (sync or async, no arguments; ``None`` means result ``None``) runs. The first
        listener's return value is the result. A listener that does not call ``next``
        short-circuits the rest. A sync listener may ``return next()``. Exceptions propagate.

        With no reachable listener the result is ``default()`` (nothing else runs). With
        ``signal``: raises :class:`~agentloop_nb.signals.AbortError` when it is aborted
        already; a chain with listeners (``default`` included) runs under an abort scope."""
        # fast path (benchmarks/bench_bus.py "unobserved waterfall"): the default itself,
        # no chain or scope; observed, the bus's own coroutine (benchmarks/README.md "Step
        # (session 11)": a delegating ``async def`` costs a coroutine per dispatch)
        if name not in self.listened:
            return _unobserved_waterfall(default, signal)
        return self._bus.waterfall(name, payload, default, self.agent, signal)

    def __repr__(self) -> str:
        state = "active" if self.fiber.active else "disposed"
        agent = "" if self.agent is None else f" agent={self.agent!r}"
        return f"<Context {self.fiber.path!r}{agent} {state}>"


async def _unobserved_waterfall(
    default: Callable[[], Any] | None, signal: AbortSignal | None
) -> Any:
    """A waterfall nobody listens to: ``default()`` (awaited when it returns an awaitable),
    or ``AbortError`` when ``signal`` is aborted already (call_default inlined)."""
    if signal is not None and signal.aborted:
        raise AbortError(signal.reason)
    if default is None:
        return None
    result = default()
    if result is not None and is_awaitable(result):
        result = await result
    return result


__all__ = [
    "EVERY_NAME",
    "INTERNAL_ERROR",
    "Context",
    "Disposer",
    "Emit",
    "ErrorReport",
    "Fiber",
    "InactiveContextError",
    "Lazy",
    "PluginError",
    "listened",
]


def __getattr__(name: str) -> Any:
    # ``ErrorReport`` loads with the first reported failure (``_bus``) or its first access here.
    if name == "ErrorReport":
        from ._error_report import ErrorReport

        globals()["ErrorReport"] = ErrorReport
        return ErrorReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
