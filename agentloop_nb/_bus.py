"""The event bus of one context tree: listener storage, scope filtering and the dispatch modes.

Private to :mod:`agentloop_nb.context`; ``Context`` is its public face and passes its own
``agent`` to every dispatch (scope filtering: an agent's dispatch skips listeners registered
for another agent).

Every mode iterates the listener tuple as it was when the dispatch started (storage is
copy-on-write), skipping listeners disposed meanwhile; a listener added mid-dispatch is not
called by that dispatch. A dispatch that reaches no listener costs one dictionary lookup (plus,
for ``waterfall``, the call of ``default``), and a :class:`Lazy` payload is built only when a
listener is reached: call sites never need to ask first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Container, Iterator
from functools import partial
from typing import Any

import anyio

from ._disposer import Disposer
from ._fiber import Fiber, close_unstarted, is_awaitable
from .errors import InvalidTypeError, UsageError
from .signals import AbortError, AbortScope, AbortSignal

_log = logging.getLogger("agentloop_nb.context")

INTERNAL_ERROR = "internal/error"

Handler = Callable[..., Any]


class Listener:
    """One registration: ``fn`` is what dispatch calls (a self-disposing wrapper for ``once``),
    ``handler`` what the user registered (for reports), ``agent`` its scope filter, ``passes``
    the waterfall listener's own "I would only pass this on" test (see ``Context.on``)."""

    __slots__ = ("agent", "fiber", "fn", "handler", "live", "passes")

    def __init__(
        self,
        fn: Handler,
        handler: Handler,
        agent: object,
        fiber: Fiber,
        passes: Callable[[Any], bool] | None = None,
    ) -> None:
        self.fn = fn
        self.handler = handler
        self.agent = agent
        self.fiber = fiber
        self.live = True
        self.passes = passes


_NONE: tuple[Listener, ...] = ()


class Lazy(partial[Any]):
    """A payload built only if a dispatch reaches a listener: ``Lazy(factory, *args)`` stands
    for ``factory(*args)``, built at most once per dispatch. Lets a hot call site dispatch an
    often unobserved hook without paying for its payload (a ``functools.partial``, so making one
    is cheaper than building most payloads)."""

    __slots__ = ()


class _EveryName:
    __slots__ = ()

    def __contains__(self, name: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "EVERY_NAME"


EVERY_NAME: Container[str] = _EveryName()
"""The ``listened`` of a dispatcher that cannot say which names it observes: every name may
be (see :func:`listened`)."""


def listened(dispatcher: object) -> Container[str]:
    """The one "does anyone listen?" test: ``NAME in listened(dispatcher)``.

    The names ``dispatcher`` has a listener for, as a live container (a ``Context``'s
    ``listened``: the bus's key view), or :data:`EVERY_NAME` for a dispatcher that cannot say.
    A call site takes its no-listener result directly (no payload, no default, no dispatch)
    only when the name is not in it. Agent scopes are not applied (``Context.has_listeners``
    does that), so a listener scoped to another agent still counts: the test may say yes when
    a dispatch would reach nobody, never the reverse. A caller that asks per append or per
    chunk fetches the container once and keeps it (it stays live), as the session does.
    """
    return getattr(dispatcher, "listened", EVERY_NAME)


def _built(payload: Any) -> Any:
    return payload() if type(payload) is Lazy else payload


def _reaches(lst: Listener, agent: object) -> bool:
    owner = lst.agent
    return lst.live and (owner is None or agent is None or owner is agent)


class Bus:
    """Listeners of one context tree (``name -> tuple``, rebuilt on every change) and the
    dispatch modes. ``agent`` is the dispatching context's agent (``None`` outside agents)."""

    __slots__ = ("listeners",)

    def __init__(self) -> None:
        self.listeners: dict[str, tuple[Listener, ...]] = {}

    # -- registration -----------------------------------------------------------------------

    def add(
        self,
        name: str,
        fn: Handler,
        handler: Handler,
        agent: object,
        fiber: Fiber,
        prepend: bool,
        passes: Callable[[Any], bool] | None = None,
    ) -> Disposer:
        """Add a listener owned by ``fiber``; raises ``InactiveContextError`` when disposed."""
        fiber.check_active("register a listener")
        listeners = self.listeners
        lst = Listener(fn, handler, agent, fiber, passes)
        current = listeners.get(name, _NONE)
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

    def reached(self, name: str, agent: object) -> Iterator[Listener]:
        """The live listeners of ``name`` a dispatch for ``agent`` reaches, over a snapshot."""
        for lst in self.listeners.get(name, _NONE):
            if _reaches(lst, agent):
                yield lst

    def has_listeners(self, name: str, agent: object) -> bool:
        listeners = self.listeners.get(name)
        if not listeners:
            return False
        return any(_reaches(lst, agent) for lst in listeners)

    # -- dispatch modes ---------------------------------------------------------------------

    def emit(self, agent: object, name: str, payload: Any = None) -> None:
        # ``agent`` first: a context's ``emit`` is ``partial(bus.emit, agent)``, so an emit
        # (once per logged event while persistence listens) is one Python frame, not two.
        listeners = self.listeners.get(name)
        if listeners is None:
            return
        for lst in listeners:
            if not lst.live:
                continue
            owner = lst.agent
            if owner is not None and agent is not None and owner is not agent:
                continue
            if type(payload) is Lazy:
                payload = payload()
            try:
                result = lst.fn(payload)
            except Exception as exc:
                self.report(name, lst.handler, exc, agent)
                continue
            if result is not None and is_awaitable(result):
                self._observe(name, lst, result, agent)

    def emit_strict(self, name: str, payload: Any, agent: object) -> None:
        if self.has_listeners(name, agent):
            payload = _built(payload)
        for lst in self.reached(name, agent):
            result = lst.fn(payload)
            if result is not None and is_awaitable(result):
                self._observe(name, lst, result, agent)

    async def parallel(self, name: str, payload: Any, agent: object) -> None:
        errors: list[Exception] = []
        awaitables: list[Awaitable[Any]] = []
        if self.has_listeners(name, agent):
            payload = _built(payload)
        for lst in self.reached(name, agent):
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

    async def serial(
        self, name: str, payload: Any, agent: object, signal: AbortSignal | None
    ) -> Any:
        listeners = self.listeners.get(name)
        if signal is not None and signal.aborted:
            raise AbortError(signal.reason)
        if not listeners:
            return None
        first = _first_reached(listeners, agent)
        if first < 0:
            return None
        payload = _built(payload)
        if signal is None:
            return await _serial(listeners, first, payload, agent)
        with AbortScope(signal):
            return await _serial(listeners, first, payload, agent)

    def bail(self, name: str, payload: Any, agent: object) -> Any:
        if self.has_listeners(name, agent):
            payload = _built(payload)
        for lst in self.reached(name, agent):
            result = lst.fn(payload)
            if result is not None:
                if is_awaitable(result):
                    close_unstarted((result,))
                    raise InvalidTypeError(
                        f"listener {lst.handler!r} of {name!r} is async, but 'bail' is a "
                        "synchronous dispatch; register a sync handler or use 'serial'"
                    )
                return result
        return None

    async def waterfall(
        self,
        name: str,
        payload: Any,
        default: Callable[[], Any] | None,
        agent: object,
        signal: AbortSignal | None,
    ) -> Any:
        listeners = self.listeners.get(name)
        if signal is not None and signal.aborted:
            raise AbortError(signal.reason)
        if not listeners:
            first = -1
        else:
            # fast path (benchmarks/README.md "Step (session 12)"): the first listener
            # reached, tested here (``_reaches`` inlined), the usual answer
            lst = listeners[0]
            owner = lst.agent
            reached = lst.live and (owner is None or agent is None or owner is agent)
            first = 0 if reached else _first_reached(listeners, agent)
        if first < 0:
            # fast path (benchmarks/bench_bus.py "unobserved waterfall"): the default itself
            return await call_default(default)
        assert listeners  # (``first`` is a listener's index)
        asked = first  # (its ``passes`` answered here: the chain does not ask it again)
        passes = listeners[first].passes
        if passes is not None and passes(agent):
            # fast path (docs/architecture.md "Step, session 15"): stepped over here, as
            # ``_Chain.start`` steps over it; when it was the last listener, no chain at all
            first += 1
        # (the payload is built by the chain, at its first listener called: one that says it
        # would only pass the dispatch on is stepped over without it)
        chain = None if first == len(listeners) else _Chain(listeners, payload, default, agent)
        if signal is None:
            return await (call_default(default) if chain is None else chain.run(first, asked))
        # fast path (benchmarks/README.md "Step and pool (session 8)"): the chain's synchronous
        # part runs before the cancel scope, which is entered only to await what it left
        # (an async listener's coroutine, not started yet, so every scope that listener opens
        # nests inside ours); a chain that answers synchronously enters none.
        try:
            if chain is not None:
                result = chain.start(first, asked)
            else:  # every listener stepped over: the chain's end, the default, is its answer
                result = None if default is None else default()
        except Exception as exc:
            if signal.aborted:  # as the scope's exit: an error after the abort is the abort
                raise AbortError(signal.reason) from exc
            raise
        if result is not None and is_awaitable(result):
            if signal.aborted:
                close_unstarted((result,))
                raise AbortError(signal.reason)
            with AbortScope(signal):
                return await result
        if signal.aborted:  # a synchronous answer after an abort: the abort wins, as in a scope
            raise AbortError(signal.reason)
        return result

    # -- error containment ------------------------------------------------------------------

    def _observe(self, name: str, lst: Listener, awaitable: Awaitable[Any], agent: object) -> None:
        """Run an async ``emit`` listener as a task owned by the listener's scope."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            close_unstarted((awaitable,))
            self.report(
                name,
                lst.handler,
                UsageError(
                    f"async listener of {name!r} was emitted without a running event loop; "
                    "emit from the loop or register a sync handler"
                ),
                agent,
            )
            return
        lst.fiber.track(loop.create_task(self._await_observer(name, lst, awaitable, agent)))

    async def _await_observer(
        self, name: str, lst: Listener, awaitable: Awaitable[Any], agent: object
    ) -> None:
        try:
            await awaitable
        except Exception as exc:
            self.report(name, lst.handler, exc, agent)

    def report(self, name: str, handler: object, exc: Exception, agent: object) -> None:
        """Log a contained failure and emit it as ``internal/error`` (never recursively)."""
        _log.error("listener %r of %r raised", handler, name, exc_info=exc)
        if name == INTERNAL_ERROR or INTERNAL_ERROR not in self.listeners:
            return
        from ._error_report import ErrorReport  # a reported failure only: loaded then

        report = ErrorReport(event=name, handler=repr(handler), error=exc)
        for lst in self.reached(INTERNAL_ERROR, agent):
            try:
                result = lst.fn(report)
            except Exception as inner:
                _log.error("internal/error listener %r raised", lst.handler, exc_info=inner)
                continue
            if result is not None and is_awaitable(result):
                self._observe(INTERNAL_ERROR, lst, result, agent)


class _Chain:
    """One waterfall dispatch: ``run(i)`` calls the next reachable listener from ``i`` with a
    ``next`` that continues after it, and finally ``default``. ``payload`` may be a ``Lazy``
    until a listener is called (then it is the built payload)."""

    __slots__ = ("agent", "default", "listeners", "payload")

    def __init__(
        self,
        listeners: tuple[Listener, ...],
        payload: Any,
        default: Callable[[], Any] | None,
        agent: object,
    ) -> None:
        self.listeners = listeners
        self.payload = payload
        self.default = default
        self.agent = agent

    async def run(self, index: int, asked: int = -1) -> Any:
        """The chain from ``index``: its synchronous part (``start``), then what that left."""
        result = self.start(index, asked)
        if result is not None and is_awaitable(result):
            result = await result
        return result

    def start(self, index: int, asked: int = -1) -> Any:
        """The chain from ``index`` as far as it runs without awaiting: a listener's (or the
        default's) answer, or the awaitable it returned, not awaited. A listener that only
        passes the dispatch on (returns ``next()`` unawaited) is stepped over here: its
        unstarted coroutine is closed and the chain continues, as awaiting it would; one
        whose ``passes(agent)`` answers true is stepped over without being called (nor the
        payload built for it): the listener says that is all it would do. The listener at
        ``asked`` was asked that already (and said no)."""
        listeners, agent = self.listeners, self.agent
        count = len(listeners)
        while index < count:
            lst = listeners[index]
            index += 1
            owner = lst.agent  # ``_reaches`` inlined: once per listener of every dispatch
            if not lst.live or (owner is not None and agent is not None and owner is not agent):
                continue
            passes = lst.passes
            if passes is not None and index - 1 != asked and passes(agent):
                continue
            payload = self.payload
            if type(payload) is Lazy:  # built once, for the first listener called
                payload = self.payload = payload()
            after = _Next(self, index)
            result = lst.fn(payload, after)
            made = after.made
            if (
                result is not made
                or made is None
                or made.cr_frame is None
                or made.cr_suspended
                or made.cr_running
            ):
                return result
            made.close()  # never started: nothing ran that closing could skip
        default = self.default
        return None if default is None else default()


class _Next:
    """The ``next`` a waterfall listener gets: ``next()`` is the rest of the chain (a
    coroutine). It keeps the last coroutine it made, so that ``_Chain.start`` can tell a
    listener that returned it unawaited."""

    __slots__ = ("chain", "index", "made")

    def __init__(self, chain: _Chain, index: int) -> None:
        self.chain = chain
        self.index = index
        self.made: Any = None

    def __call__(self) -> Any:
        made = self.made = self.chain.run(self.index)
        return made


def _first_reached(listeners: tuple[Listener, ...], agent: object) -> int:
    for index, lst in enumerate(listeners):
        if _reaches(lst, agent):
            return index
    return -1


async def _serial(listeners: tuple[Listener, ...], first: int, payload: Any, agent: object) -> Any:
    for lst in listeners[first:]:
        if not _reaches(lst, agent):
            continue
        result = lst.fn(payload)
        if result is not None and is_awaitable(result):
            result = await result
        if result is not None:
            return result
    return None


async def call_default(default: Callable[[], Any] | None) -> Any:
    """The end of a waterfall chain: ``default()``, awaited when it returns an awaitable."""
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


__all__ = [
    "EVERY_NAME",
    "INTERNAL_ERROR",
    "Bus",
    "Handler",
    "Lazy",
    "Listener",
    "call_default",
]
