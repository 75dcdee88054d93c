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
- ``await serial`` / ``bail`` — in order, first non-``None`` return wins; exceptions propagate.
  ``bail`` is synchronous and rejects async listeners with ``TypeError``.
- ``await waterfall`` — middleware: ``handler(payload, next)``; ``await next()`` runs the rest
  of the chain and finally ``default()``; not calling ``next`` short-circuits.

Every mode iterates the listener tuple as it was when the dispatch started (storage is
copy-on-write), skipping listeners disposed meanwhile; a listener added mid-dispatch is not
called by that dispatch.
"""

from __future__ import annotations

import asyncio
import keyword
import logging
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict

from ._disposer import Disposer
from ._fiber import Fiber, InactiveContextError, close_unstarted, is_awaitable

_log = logging.getLogger("agentloop_nb.context")

INTERNAL_ERROR = "internal/error"

Handler = Callable[..., Any]


class ErrorReport(BaseModel):
    """Payload of ``internal/error``: a contained listener or teardown failure.

    ``event`` is the dispatched event name (``fiber/dispose`` for teardown errors), ``handler``
    the failing callable's ``repr`` and ``error`` the exception.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    type: Literal["internal/error"] = "internal/error"
    event: str
    handler: str
    error: Exception


class PluginError(RuntimeError):
    """A plugin cannot be applied (e.g. a service it injects is not provided)."""


class _Listener:
    __slots__ = ("agent", "fiber", "fn", "handler", "live")

    def __init__(self, fn: Handler, handler: Handler, agent: object, fiber: Fiber) -> None:
        self.fn = fn  # what dispatch calls (a self-disposing wrapper for `once`)
        self.handler = handler  # what the user registered, for reports
        self.agent = agent
        self.fiber = fiber
        self.live = True


_NO_LISTENERS: tuple[_Listener, ...] = ()


class _Hub:
    """State shared by every context of one tree."""

    __slots__ = ("gen", "listeners")

    def __init__(self) -> None:
        # name -> tuple, rebuilt on every change so a dispatch can iterate without copying.
        self.listeners: dict[str, tuple[_Listener, ...]] = {}
        self.gen = 0  # bumped on every provide/unprovide; invalidates service caches


class _Namespace:
    """One layer of services. ``child()`` opens a new layer; plugin contexts publish into
    their parent's layer, so a plugin's services are visible to its siblings."""

    __slots__ = ("parent", "services")

    def __init__(self, parent: _Namespace | None) -> None:
        self.parent = parent
        self.services: dict[str, Any] = {}


_MISSING: Any = object()


class Context:
    """Plugin/service container and event bus. ``Context()`` makes a root.

    Attributes: ``fiber`` (its scope), ``parent`` (``None`` for the root), ``root``, ``agent``
    (the agent this context is scoped to, inherited by children; ``None`` outside agents),
    ``name``, ``active``. Any other public attribute resolves a service (see :meth:`provide`).
    """

    __slots__ = (
        "_cache",
        "_hub",
        "_listeners",
        "_named",
        "_ns",
        "agent",
        "fiber",
        "name",
        "parent",
        "root",
    )

    _hub: _Hub
    _listeners: dict[str, tuple[_Listener, ...]]
    _ns: _Namespace
    _named: dict[str, Fiber]
    _cache: dict[str, tuple[int, Any, Any]]
    agent: Any
    fiber: Fiber
    name: str
    parent: Context | None
    root: Context

    def __init__(self, *, name: str = "root") -> None:
        hub = _Hub()
        self._setup(hub, _Namespace(None), None, None, Fiber(name, report=self._report_raw))

    def _setup(
        self, hub: _Hub, ns: _Namespace, parent: Context | None, agent: object, fiber: Fiber
    ) -> None:
        self._hub = hub
        self._listeners = hub.listeners
        self._ns = ns
        self._named = {}
        self._cache = {}
        self.agent = agent
        self.fiber = fiber
        self.name = fiber.name
        self.parent = parent
        self.root = self if parent is None else parent.root

    def _derive(self, name: str, agent: object, ns: _Namespace) -> Context:
        self.fiber.check_active("derive a context")
        ctx = object.__new__(Context)
        fiber = Fiber(name, self.fiber, report=ctx._report_raw)
        ctx._setup(self._hub, ns, self, agent, fiber)
        return ctx

    @property
    def active(self) -> bool:
        return self.fiber._active

    def child(self, *, name: str | None = None, agent: object = None) -> Context:
        """A child context with its own scope (nested in this one) and its own service layer.

        ``agent`` scopes it to an agent; when ``None`` the parent's agent is inherited.
        Raises :class:`InactiveContextError` if this context was disposed.
        """
        return self._derive(
            name or "child", self.agent if agent is None else agent, _Namespace(self._ns)
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
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            raise ValueError(
                f"service name {name!r} must be a public Python identifier (no leading '_')"
            )
        if hasattr(Context, name):
            raise ValueError(f"service name {name!r} would be shadowed by Context.{name}")
        services = self._ns.services
        if name in services:
            raise ValueError(
                f"service {name!r} is already provided here; dispose the existing provider "
                "(or its plugin) first, or provide it on a child context to shadow it"
            )
        hub = self._hub
        services[name] = service
        hub.gen += 1

        def unprovide() -> None:
            if services.get(name) is service:
                del services[name]
                hub.gen += 1

        return self.fiber.own(unprovide)

    def _find(self, name: str) -> Any:
        ns: _Namespace | None = self._ns
        while ns is not None:
            service = ns.services.get(name, _MISSING)
            if service is not _MISSING:
                return service
            ns = ns.parent
        return _MISSING

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails, i.e. for service names.
        if name.startswith("_"):
            raise AttributeError(name)
        gen = self._hub.gen
        entry = self._cache.get(name)
        if entry is not None and entry[0] == gen:
            return entry[2]
        service = self._find(name)
        if service is _MISSING:
            raise AttributeError(
                f"context {self.fiber.path!r} has no service {name!r}; provide it with "
                f"ctx.provide({name!r}, obj) or apply the plugin that provides it"
            )
        if entry is not None and entry[1] is service:
            value = entry[2]  # same provider: keep the view (views are stable per context)
        else:
            bind = getattr(type(service), "__bind__", None)
            value = service if bind is None else bind(service, self)
        self._cache[name] = (gen, service, value)
        return value

    # -- registration -----------------------------------------------------------------------

    def on(self, name: str, handler: Handler, *, prepend: bool = False) -> Disposer:
        """Listen to ``name``; the listener is owned by this context's scope and remembers its
        agent for scope filtering. ``prepend`` puts it first. Raises
        :class:`InactiveContextError` when this context was disposed."""
        return self._add(name, handler, handler, prepend)

    def once(self, name: str, handler: Handler) -> Disposer:
        """Like :meth:`on`, but the listener disposes itself just before its first call."""

        def fire(*args: Any) -> Any:
            disposer()
            return handler(*args)

        disposer = self._add(name, fire, handler, False)
        return disposer

    def _add(self, name: str, fn: Handler, handler: Handler, prepend: bool) -> Disposer:
        fiber = self.fiber
        fiber.check_active("register a listener")
        listeners = self._listeners
        lst = _Listener(fn, handler, self.agent, fiber)
        current = listeners.get(name, _NO_LISTENERS)
        listeners[name] = (lst, *current) if prepend else (*current, lst)

        def remove() -> None:
            lst.live = False
            cur = listeners.get(name)
            if cur is None:
                return
            rest = tuple(x for x in cur if x is not lst)
            if rest:
                listeners[name] = rest
            else:
                del listeners[name]

        return fiber.own(remove)

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
            raise TypeError(
                f"effect setup {setup!r} must synchronously return a teardown callable or "
                f"None, got {type(teardown).__name__}"
            )
        if not self.fiber._active:  # setup disposed its own scope: undo right away
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
            raise TypeError(f"a plugin must be a function or a class, got {plugin!r}")
        if name is None:
            attr = getattr(plugin, "name", None)
            name = attr if isinstance(attr, str) else None
        label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        config = _validate_config(plugin, config)
        inject = getattr(plugin, "inject", ())
        for service in (inject,) if isinstance(inject, str) else inject:
            if self._find(service) is _MISSING:
                raise PluginError(
                    f"plugin {label!r} requires service {service!r}, which is not provided to "
                    f"context {self.fiber.path!r}; provide it first with "
                    f"ctx.provide({service!r}, obj) or apply the plugin that provides it"
                )
        named = self._named
        if name is not None:
            old = named.get(name)
            if old is not None:
                old.dispose()  # its own teardown removes it from `named`
        ctx = self._derive(label, self.agent, self._ns)
        fiber = ctx.fiber
        fiber.config = config
        if name is not None:
            named[name] = fiber

            def forget() -> None:
                if named.get(name) is fiber:
                    del named[name]

            fiber.own(forget)
        try:
            if isinstance(plugin, type):
                instance = plugin(ctx, config)
                fiber.instance = instance
                dispose = getattr(instance, "dispose", None)
                if callable(dispose):
                    fiber.own(dispose)
            else:
                result = plugin(ctx, config)
                if result is not None and is_awaitable(result):
                    close_unstarted((result,))
                    raise TypeError(
                        f"plugin {label!r} returned an awaitable: apply must be synchronous "
                        "(start async work with ctx.effect or a task owned by a service)"
                    )
        except BaseException:
            fiber.dispose()
            raise
        return fiber

    # -- dispatch ---------------------------------------------------------------------------

    def _reached(self, name: str) -> Iterator[_Listener]:
        """The live listeners of ``name`` this context's dispatch reaches, over a snapshot
        (scope filtering: an agent's dispatch skips other agents' listeners). ``emit``
        inlines the same loop: it runs once per streamed chunk."""
        agent = self.agent
        for lst in self._listeners.get(name, _NO_LISTENERS):
            if lst.live and (lst.agent is None or agent is None or lst.agent is agent):
                yield lst

    def has_listeners(self, name: str) -> bool:
        """Whether a dispatch of ``name`` through this context would reach any listener.

        Lets hot paths skip building a payload (and a cancel scope) for an unobserved hook."""
        if not self._listeners.get(name):  # the common case: no generator to build
            return False
        return next(self._reached(name), None) is not None

    def emit(self, name: str, payload: Any = None) -> None:
        """Notify listeners synchronously; their exceptions are contained and reported."""
        listeners = self._listeners.get(name)
        if listeners is None:
            return
        agent = self.agent
        for lst in listeners:
            if not lst.live:
                continue
            owner = lst.agent
            if owner is not None and agent is not None and owner is not agent:
                continue
            try:
                result = lst.fn(payload)
            except Exception as exc:
                self._contain(name, lst, exc)
                continue
            if result is not None and is_awaitable(result):
                self._observe(name, lst, result)

    def emit_strict(self, name: str, payload: Any = None) -> None:
        """Notify listeners synchronously; the first exception propagates (a veto) and the
        remaining listeners are not called. Async listeners run as under :meth:`emit`."""
        for lst in self._reached(name):
            result = lst.fn(payload)
            if result is not None and is_awaitable(result):
                self._observe(name, lst, result)

    async def parallel(self, name: str, payload: Any = None) -> None:
        """Run all listeners concurrently; once every one settled, raise an
        ``ExceptionGroup`` of the failures (if any). Cancellation cancels them all."""
        errors: list[Exception] = []
        awaitables: list[Awaitable[Any]] = []
        for lst in self._reached(name):
            try:
                result = lst.fn(payload)
            except Exception as exc:
                errors.append(exc)
                continue
            if result is not None and is_awaitable(result):
                awaitables.append(result)
        if len(awaitables) == 1:
            await _settle(awaitables[0], errors)
        elif awaitables:
            try:
                async with anyio.create_task_group() as tg:
                    for aw in awaitables:
                        tg.start_soon(_settle, aw, errors)
            finally:
                close_unstarted(awaitables)  # cancelled before some task ever started
        if errors:
            raise ExceptionGroup(f"{len(errors)} listener(s) of {name!r} failed", errors)

    async def serial(self, name: str, payload: Any = None) -> Any:
        """Run listeners in order, awaiting each; return the first non-``None`` result
        (later listeners are skipped) or ``None``. Exceptions propagate."""
        for lst in self._reached(name):
            result = lst.fn(payload)
            if result is not None and is_awaitable(result):
                result = await result
            if result is not None:
                return result
        return None

    def bail(self, name: str, payload: Any = None) -> Any:
        """Synchronous :meth:`serial`. An async listener raises ``TypeError``."""
        for lst in self._reached(name):
            result = lst.fn(payload)
            if result is not None:
                if is_awaitable(result):
                    close_unstarted((result,))
                    raise TypeError(
                        f"listener {lst.handler!r} of {name!r} is async, but 'bail' is a "
                        "synchronous dispatch; register a sync handler or use 'serial'"
                    )
                return result
        return None

    async def waterfall(
        self, name: str, payload: Any, default: Callable[[], Any] | None = None
    ) -> Any:
        """Middleware chain: each listener is called as ``handler(payload, next)`` where
        ``await next()`` runs the rest of the chain; after the last listener ``default()``
        (sync or async, no arguments; ``None`` means result ``None``) runs. The first
        listener's return value is the result. A listener that does not call ``next``
        short-circuits the rest. A sync listener may ``return next()``. Exceptions propagate."""
        listeners = self._listeners.get(name, _NO_LISTENERS)
        if not listeners:
            # Hot path (several waterfalls per loop step are usually unobserved): no chain to
            # build, the result is the default's.
            return await _call_default(default)
        agent = self.agent
        count = len(listeners)

        async def run(index: int) -> Any:
            while index < count:
                lst = listeners[index]
                index += 1
                if not lst.live:
                    continue
                owner = lst.agent
                if owner is not None and agent is not None and owner is not agent:
                    continue
                result = lst.fn(payload, partial(run, index))
                if result is not None and is_awaitable(result):
                    result = await result
                return result
            return await _call_default(default)

        return await run(0)

    # -- error containment -------------------------------------------------------------------

    def _observe(self, name: str, lst: _Listener, awaitable: Awaitable[Any]) -> None:
        """Run an async ``emit`` listener as a task owned by the listener's scope."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            close_unstarted((awaitable,))
            self._contain(
                name,
                lst,
                RuntimeError(
                    f"async listener of {name!r} was emitted without a running event loop; "
                    "emit from the loop or register a sync handler"
                ),
            )
            return
        lst.fiber.track(loop.create_task(self._await_observer(name, lst, awaitable)))

    async def _await_observer(self, name: str, lst: _Listener, awaitable: Awaitable[Any]) -> None:
        try:
            await awaitable
        except Exception as exc:
            self._contain(name, lst, exc)

    def _contain(self, name: str, lst: _Listener, exc: Exception) -> None:
        self._report_raw(name, lst.handler, exc)

    def _report_raw(self, name: str, handler: object, exc: Exception) -> None:
        _log.error("listener %r of %r raised", handler, name, exc_info=exc)
        if name == INTERNAL_ERROR:
            return  # never report a failing error observer recursively
        if INTERNAL_ERROR not in self._listeners:
            return
        report = ErrorReport(event=name, handler=repr(handler), error=exc)
        for lst in self._reached(INTERNAL_ERROR):
            try:
                result = lst.fn(report)
            except Exception as inner:
                _log.error("internal/error listener %r raised", lst.handler, exc_info=inner)
                continue
            if result is not None and is_awaitable(result):
                self._observe(INTERNAL_ERROR, lst, result)

    def __repr__(self) -> str:
        state = "active" if self.fiber._active else "disposed"
        agent = "" if self.agent is None else f" agent={self.agent!r}"
        return f"<Context {self.fiber.path!r}{agent} {state}>"


async def _call_default(default: Callable[[], Any] | None) -> Any:
    if default is None:
        return None
    result = default()
    if result is not None and is_awaitable(result):
        result = await result
    return result


async def _settle(awaitable: Awaitable[Any], errors: list[Exception]) -> None:
    try:
        await awaitable
    except Exception as exc:
        errors.append(exc)


def _validate_config(plugin: Any, config: Any) -> Any:
    model = getattr(plugin, "Config", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return config
    if config is None:
        return model()
    if isinstance(config, model):
        return config
    return model.model_validate(config)


__all__ = [
    "INTERNAL_ERROR",
    "Context",
    "ErrorReport",
    "Fiber",
    "InactiveContextError",
    "PluginError",
]
