"""Routers: one listener per hook and dispatcher, handing each payload to its key's callbacks.

Many views listen to the same hook for a few keys each (a feed wants ``session/event`` of one
session, a sub-agent view ``session/created`` of its parent's children). One listener per hook
and dispatcher that looks the key up in a dictionary costs one call per event however many views
are open, where a listener per view would cost one call per view.

Who keeps the routers: the dispatcher itself. They live in a :class:`Routers` table provided on
the dispatching context as the service ``ctx.notebook_routers`` (created on first need), so they
are owned by that context's scope: disposed with it, never reachable from a module, never
looked up by ``id()``. A dispatcher that cannot hold a service (no ``provide``, or its layer
already provides that name for another context) gets a table of its own for each call: routing
still works, only without sharing. A router listens only while it has callbacks, so an idle
kernel pays nothing on the hook (its name leaves ``listened``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any

from ..._disposer import Disposer

__all__ = ["SERVICE", "Router", "Routers", "router"]

SERVICE = "notebook_routers"
"""The service name a dispatching context holds its :class:`Routers` under."""

KeyOf = Callable[[Any], Hashable]
"""``key_of(payload)``: the key a payload is routed by (``None``: nobody's)."""


class Router:
    """One listener of hook ``name`` on ``dispatch``, calling ``callback(payload)`` for each
    callback added under ``key_of(payload)``. Listens from the first :meth:`add` until the last
    callback is removed (and again after a later add)."""

    def __init__(self, dispatch: Any, name: str, key_of: KeyOf) -> None:
        self.dispatch = dispatch
        self.name = name
        self.key_of = key_of
        self.waiting: dict[Hashable, list[Callable[[Any], None]]] = {}
        self._off: Disposer | None = None

    def route(self, payload: Any) -> None:
        callbacks = self.waiting.get(self.key_of(payload))
        if callbacks:
            if len(callbacks) == 1:  # the common case (one feed per session): no copy
                callbacks[0](payload)
                return
            for callback in tuple(callbacks):  # a copy: a callback may remove itself
                callback(payload)

    def add(self, key: Hashable, callback: Callable[[Any], None]) -> Disposer:
        """Call ``callback(payload)`` for each payload routed to ``key``; the returned
        ``Disposer`` stops (and stops listening when nobody is left)."""
        if self._off is None or self._off.disposed:  # (disposed: its context's scope ended)
            self._off = self.dispatch.on(self.name, self.route)
        self.waiting.setdefault(key, []).append(callback)

        def remove() -> None:
            callbacks = self.waiting.get(key, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                self.waiting.pop(key, None)
            if not self.waiting and self._off is not None:  # nobody left: stop listening
                off, self._off = self._off, None
                off()

        return Disposer(remove)


class Routers:
    """The routers of one dispatcher, one per hook name and key function."""

    def __init__(self, dispatch: Any) -> None:
        self.dispatch = dispatch
        self._routers: dict[tuple[str, KeyOf], Router] = {}

    def get(self, name: str, key_of: KeyOf) -> Router:
        """The router of hook ``name`` by ``key_of`` (made on first need)."""
        found = self._routers.get((name, key_of))
        if found is None:
            found = self._routers[(name, key_of)] = Router(self.dispatch, name, key_of)
        return found


def router(dispatch: Any, name: str, key_of: KeyOf) -> Router:
    """The router of hook ``name`` by ``key_of`` that ``dispatch`` holds (see the module
    docstring); ``key_of`` should be one module-level function per use, so its callers share."""
    held = getattr(dispatch, SERVICE, None)
    if not (isinstance(held, Routers) and held.dispatch is dispatch):
        held = Routers(dispatch)
        provide = getattr(dispatch, "provide", None)
        if provide is not None:
            # A ValueError: this layer already holds the name (a sibling plugin context's
            # table, or a user's service): this caller routes through a table of its own.
            with contextlib.suppress(ValueError):
                provide(SERVICE, held)
    return held.get(name, key_of)
