"""``AbortController`` / ``AbortSignal``: the cooperative cancellation token the loop hands to
every hook, model stream and tool body, and :class:`AbortScope`, the one way to make an abort
interrupt an ``await``.

A signal is aborted at most once; the first reason wins. It is not thread-safe: abort it from the
event loop that awaits it (use ``loop.call_soon_threadsafe`` from other threads).

The abort idiom: ``with AbortScope(signal): ...`` (or ``await signal.run(awaitable)`` for a
single await). Code that honours the signal cooperatively needs nothing else; the scope is the
backstop that keeps code which ignores the signal from holding its caller. Inside the block an
abort cancels the pending await (an anyio cancel scope), and the block ends with
:class:`AbortError` carrying the reason:

- already aborted on entry: ``AbortError`` at once, the block never runs (``run`` closes a
  coroutine it will never start, so nothing warns "never awaited");
- aborted while the block awaits: the await is cancelled, ``AbortError`` replaces the
  cancellation;
- aborted, but the block still finishes normally (it caught the cancellation, or finished
  cooperatively, or the abort came after its last await): by default ``AbortError`` all the
  same — once aborted, the abort wins. ``strict=False`` keeps the block's own outcome instead,
  for callers whose work may honour the signal and return a meaningful result (a tool body
  that stops early and says so);
- aborted, and the block raises an ``Exception`` (e.g. it turned the cancellation into its own
  error): ``AbortError`` chained from it;
- anything else (no abort; a cancellation from an enclosing scope; ``KeyboardInterrupt``)
  propagates unchanged.

The scope removes its callback from the signal on exit, so a long-lived signal does not collect
one callback per await. Scopes nest (each follows its own signal); a ``None`` signal makes the
scope a no-op, for code paths that may run without one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator
from operator import attrgetter
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from ._disposer import Disposer
from ._fiber import close_unstarted
from .errors import AgentloopError, UsageError

T = TypeVar("T")

_log = logging.getLogger("agentloop_nb.signals")
_new = object.__new__


class AbortError(AgentloopError):
    """Raised by :meth:`AbortSignal.throw_if_aborted`, :meth:`AbortSignal.run` and
    :class:`AbortScope`; ``reason`` is the abort reason."""

    def __init__(self, reason: Any = None) -> None:
        super().__init__(f"aborted: {reason!r}")
        self.reason = reason


class AbortSignal:
    """Read side of an :class:`AbortController`.

    ``aborted`` and ``reason`` can be read at any time; ``add_callback`` runs a callback once on
    abort (immediately if already aborted); ``await signal`` (or ``await signal.wait()``)
    returns once aborted. Callback errors are logged and contained.
    """

    __slots__ = ("_aborted", "_callbacks", "_reason", "_waiters")

    def __init__(self) -> None:
        self._aborted = False
        self._reason: Any = None
        self._callbacks: list[Callable[[Any], Any]] = []
        self._waiters: list[asyncio.Future[None]] | None = None  # made by the first wait()

    if TYPE_CHECKING:

        @property
        def aborted(self) -> bool: ...
        @property
        def reason(self) -> Any: ...

    else:
        # C-level getters (``attrgetter``): no Python frame for a read, and the loop reads
        # ``aborted`` about eight times a step.
        aborted = property(attrgetter("_aborted"), doc="Whether the signal has aborted.")
        reason = property(attrgetter("_reason"), doc="The abort reason (``None`` until then).")

    def throw_if_aborted(self) -> None:
        """Raise :class:`AbortError` carrying ``reason`` when aborted; otherwise do nothing."""
        if self._aborted:
            raise AbortError(self._reason)

    def add_callback(self, callback: Callable[[Any], Any]) -> Disposer:
        """Call ``callback(reason)`` once when the signal aborts (now, if it already has).

        Returns a disposer that removes the callback if it has not run yet.
        """
        if self._aborted:
            _run_callback(callback, self._reason)
            return Disposer()
        self._callbacks.append(callback)

        def remove() -> None:
            try:  # noqa: SIM105  (no context manager object: runs once per model stream)
                self._callbacks.remove(callback)
            except ValueError:  # already ran or already removed
                pass

        return Disposer(remove)

    async def wait(self) -> Any:
        """Return the reason once the signal aborts. Cancelling the waiter is safe."""
        if self._aborted:
            return self._reason
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if self._waiters is not None and fut in self._waiters:
                self._waiters.remove(fut)
        return self._reason

    def __await__(self) -> Generator[Any, None, Any]:
        return self.wait().__await__()

    async def run(self, awaitable: Awaitable[T], *, strict: bool = True) -> T:
        """Await ``awaitable`` under an :class:`AbortScope` of this signal and return its result.

        Raises :class:`AbortError` (carrying ``reason``) when the signal is already aborted (a
        never-started coroutine is closed; other awaitables are left alone), when an abort
        cancels the await, or (unless ``strict=False``) when it returns after the abort. Other
        exceptions propagate, except that an ``Exception`` raised after the abort becomes an
        ``AbortError`` chained from it.
        """
        if self._aborted:
            close_unstarted((awaitable,))
            raise AbortError(self._reason)
        with AbortScope(self, strict=strict):
            return await awaitable

    def _abort(self, reason: Any) -> bool:
        if self._aborted:
            return False
        self._aborted = True
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        waiters, self._waiters = self._waiters or (), None
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        for cb in callbacks:
            _run_callback(cb, reason)
        return True

    @classmethod
    def any(cls, *signals: AbortSignal) -> AbortSignal:
        """A signal that aborts when the first of ``signals`` aborts, with that one's reason."""
        controller = AbortController()
        for s in signals:
            if s._aborted:  # no need to subscribe to the others at all
                controller.abort(s._reason)
                return controller.signal
        # Unsubscribe from every source once the combined signal aborts; otherwise each call
        # leaves a callback (and this controller) on long-lived sources until they abort.
        disposers = [s.add_callback(controller.abort) for s in signals]
        controller.signal.add_callback(lambda _reason: [d() for d in disposers])
        return controller.signal

    def __repr__(self) -> str:
        return (
            f"<AbortSignal aborted reason={self._reason!r}>" if self._aborted else "<AbortSignal>"
        )


def _run_callback(callback: Callable[[Any], Any], reason: Any) -> None:
    try:
        callback(reason)
    except Exception:
        _log.exception("AbortSignal callback %r raised", callback)


class AbortScope:
    """``with AbortScope(signal):`` — an abort of ``signal`` cancels the block's pending await and
    the block ends with :class:`AbortError` (see the module docstring for every case).

    A synchronous context manager around an anyio cancel scope: use it inside a task, around
    awaits, never across a ``yield`` of an async generator. Single use. ``signal=None`` makes it
    a no-op. Raises :class:`AbortError` on entry when the signal is already aborted.
    ``strict=False`` lets a block that finishes normally after the abort keep its outcome.

    Cost: entering and leaving is dominated by the anyio cancel scope (microseconds): fine around
    a hook, a tool body or a network read, too much around every streamed token.
    """

    __slots__ = ("_cancel", "_on_abort", "signal", "strict")

    def __init__(self, signal: AbortSignal | None, *, strict: bool = True) -> None:
        self.signal = signal
        self.strict = strict
        self._cancel: anyio.CancelScope | None = None
        self._on_abort: Callable[[Any], Any] | None = None

    def __enter__(self) -> AbortScope:
        signal = self.signal
        if signal is None:
            return self
        if signal._aborted:
            raise AbortError(signal._reason)
        if self._cancel is not None:
            raise UsageError("an AbortScope can be entered only once")
        cancel = self._cancel = cancel_scope()
        cancel.__enter__()
        # One bound callable, appended and removed directly: the scope runs around hot awaits.
        self._on_abort = _Canceller(cancel)
        signal._callbacks.append(self._on_abort)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        signal, cancel = self.signal, self._cancel
        if signal is None or cancel is None:
            return False
        try:  # noqa: SIM105  (no context manager object: runs once per tool body)
            signal._callbacks.remove(self._on_abort)  # type: ignore[arg-type]
        except ValueError:  # gone already when the abort ran it
            pass
        cancel.__exit__(exc_type, exc, tb)
        if cancel.cancelled_caught:
            raise AbortError(signal._reason) from None
        if signal._aborted:
            return abort_outcome(signal, exc, self.strict)
        return False

    @property
    def aborted(self) -> bool:
        """Whether the signal aborted (before or during the block)."""
        return self.signal is not None and self.signal._aborted

    def __repr__(self) -> str:
        return f"<AbortScope {self.signal!r}>"


def abort_outcome(signal: AbortSignal, exc: BaseException | None, strict: bool) -> Literal[False]:
    """How a block that ran under ``signal`` ends once its cancel scope is left without having
    caught its own cancellation, ``signal`` being aborted (:class:`AbortScope`'s rule, shared
    by the tool pool's per-worker scope): an ``AbortError`` passes as it is; a normal finish
    keeps its outcome unless ``strict`` (then the abort wins); an ``Exception`` raised after
    the abort becomes ``AbortError`` (chained); anything else (``BaseException``) passes."""
    if isinstance(exc, AbortError):
        return False
    if exc is None:
        if not strict:
            return False  # a normal finish after the abort keeps its outcome
        raise AbortError(signal._reason)  # a late normal finish: the abort wins
    if isinstance(exc, Exception):
        raise AbortError(signal._reason) from exc
    return False


def cancel_scope(*, shield: bool = False) -> anyio.CancelScope:
    """``anyio.CancelScope(shield=shield)`` of the running backend (not in ``__all__``: the
    package's own scopes, e.g. ``AbortScope``'s, the tool bodies' and the turn end's shield).
    A running asyncio loop means anyio's asyncio backend, as anyio itself assumes without
    sniffio."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.CancelScope(shield=shield)
    # fast path (benchmarks/README.md "Issue 28: a tool step's own work"): the backend's class,
    # learnt from the first scope, called directly; ``anyio.CancelScope()`` asks which async
    # library runs (four Python calls, about 12 k instructions) at every scope
    if _ASYNCIO_SCOPE:
        return _ASYNCIO_SCOPE[0](shield=shield)
    scope = anyio.CancelScope(shield=shield)
    _ASYNCIO_SCOPE.append(type(scope))
    return scope


# The asyncio backend's cancel scope class, once a scope was made under asyncio (a constant
# of the installed anyio, learnt lazily so that importing this module loads no backend).
_ASYNCIO_SCOPE: list[Callable[..., anyio.CancelScope]] = []


class _Canceller:
    """The callback an :class:`AbortScope` puts on its signal: cancels the scope's await."""

    __slots__ = ("scope",)

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope

    def __call__(self, _reason: Any) -> None:
        self.scope.cancel()


class AbortController:
    """Write side: ``abort(reason)`` aborts ``signal``; only the first call has an effect."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> bool:
        """Abort the signal. Returns ``True`` when this call aborted it, ``False`` if it already was."""
        return self.signal._abort(reason)

    def follow(self, parent: AbortSignal) -> None:
        """Abort this controller (with the parent's reason) when ``parent`` aborts, at once if
        it has; :meth:`unfollow` undoes it. The cheap link of a short-lived child (one per
        tool call): no disposer, no closure."""
        if parent._aborted:
            self.abort(parent._reason)
        else:
            parent._callbacks.append(self.abort)

    def unfollow(self, parent: AbortSignal) -> None:
        """Stop following ``parent`` (nothing happens if the link is gone already)."""
        try:  # noqa: SIM105  (no context manager object: runs once per tool call)
            parent._callbacks.remove(self.abort)
        except ValueError:  # ran (parent aborted) or removed before
            pass

    def __repr__(self) -> str:
        return f"<AbortController {self.signal!r}>"


def controller_following(parent: AbortSignal) -> AbortController:
    """``AbortController()`` then its ``follow(parent)``, without the two ``__init__`` calls (not
    in ``__all__``: the tool pool's own). The pool makes one per call, and a class call through
    an ``__init__`` costs several times a plain call; the fields set are exactly the
    constructors' (a test compares them)."""
    signal = _new(AbortSignal)
    signal._aborted = False
    signal._reason = None
    signal._callbacks = []
    signal._waiters = None
    controller = _new(AbortController)
    controller.signal = signal
    controller.follow(parent)  # the link's rules stay in one place
    return controller


__all__ = ["AbortController", "AbortError", "AbortScope", "AbortSignal"]
