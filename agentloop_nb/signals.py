"""``AbortController`` / ``AbortSignal``: the cooperative cancellation token the loop hands to
every hook, model stream and tool body.

A signal is aborted at most once; the first reason wins. It is not thread-safe: abort it from the
event loop that awaits it (use ``loop.call_soon_threadsafe`` from other threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Generator
from typing import Any

from ._disposer import Disposer

_log = logging.getLogger("agentloop_nb.signals")


class AbortError(Exception):
    """Raised by :meth:`AbortSignal.throw_if_aborted`; ``reason`` is the abort reason."""

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
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> Any:
        return self._reason

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
            with contextlib.suppress(ValueError):  # already ran or already removed
                self._callbacks.remove(callback)

        return Disposer(remove)

    async def wait(self) -> Any:
        """Return the reason once the signal aborts. Cancelling the waiter is safe."""
        if self._aborted:
            return self._reason
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
        return self._reason

    def __await__(self) -> Generator[Any, None, Any]:
        return self.wait().__await__()

    def _abort(self, reason: Any) -> bool:
        if self._aborted:
            return False
        self._aborted = True
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        waiters, self._waiters = self._waiters, []
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


class AbortController:
    """Write side: ``abort(reason)`` aborts ``signal``; only the first call has an effect."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> bool:
        """Abort the signal. Returns ``True`` when this call aborted it, ``False`` if it already was."""
        return self.signal._abort(reason)

    def __repr__(self) -> str:
        return f"<AbortController {self.signal!r}>"


__all__ = ["AbortController", "AbortError", "AbortSignal"]
