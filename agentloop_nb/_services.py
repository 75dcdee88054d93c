"""Services of one context tree: layered namespaces, ``provide`` and resolution with binding.

Private to :mod:`agentloop_nb.context`. A :class:`Layer` holds the services provided at one
level; ``ctx.child()`` opens a new layer over its parent's, while a plugin context publishes
into its parent's layer (so a plugin's services are visible to its siblings). A service that
defines ``__bind__(self, ctx)`` is resolved, per context, to the view that call returns (see
:mod:`agentloop_nb._scoped` for the generic binding helpers).
"""

from __future__ import annotations

import keyword
import weakref
from collections.abc import Callable
from typing import Any

from .errors import InvalidValueError

MISSING: Any = object()


class Layer:
    """One layer of services, chained to its parent layer."""

    __slots__ = ("parent", "services")

    def __init__(self, parent: Layer | None) -> None:
        self.parent = parent
        self.services: dict[str, Any] = {}

    def find(self, name: str) -> Any:
        """The nearest provider of ``name`` (this layer first), or :data:`MISSING`."""
        layer: Layer | None = self
        while layer is not None:
            service = layer.services.get(name, MISSING)
            if service is not MISSING:
                return service
            layer = layer.parent
        return MISSING


class Generation:
    """A counter shared by a context tree, bumped whenever a service is provided or withdrawn:
    a context's resolution cache is valid while the generation it recorded is current.

    It also empties, at each bump, the core-service holders (:class:`CoreHolder`) the tree's
    contexts filled since the last one (:meth:`keep`): a holder's answers are the current
    generation's, so a context reads them without comparing generations."""

    __slots__ = ("filled", "prune_at", "value")

    def __init__(self) -> None:
        self.value = 0
        # Weak references to the holders filled in this generation (a holder leaves with its
        # context). A list, not a ``WeakSet``: appending while a bump iterates (a reader on
        # another thread) is safe for a list and an error for a set.
        self.filled: list[weakref.ref[CoreHolder]] = []
        self.prune_at = 64  # dead references are dropped when the list grows past this

    def bump(self) -> None:
        """A service was provided or withdrawn: every answer kept so far may be stale."""
        self.value += 1
        filled = self.filled
        if filled:
            self.filled = []
            self.prune_at = 64
            for ref in filled:
                holder = ref()
                if holder is not None:
                    holder.__dict__.clear()

    def keep(self, holder: CoreHolder, name: str, value: Any, resolved_at: int) -> None:
        """Keep ``value``, resolved in generation ``resolved_at``, as ``holder``'s answer for
        ``name`` until the next :meth:`bump`; nothing when that generation is over."""
        kept = holder.__dict__
        if not kept:
            filled = self.filled
            filled.append(weakref.ref(holder))
            if len(filled) > self.prune_at:  # amortised: contexts come and go between bumps
                filled[:] = [ref for ref in filled if ref() is not None]
                self.prune_at = 2 * len(filled) + 64
        kept[name] = value
        # Checked after the store: a bump that ran in between (a reader on another thread)
        # either emptied the holder already or is seen here, and the answer is dropped.
        if self.value != resolved_at:
            kept.pop(name, None)


class CoreHolder:
    """One context's core services as resolved in the current generation, as plain instance
    attributes: ``Context.llm`` and its kin read ``ctx._core.llm`` with one C-level getter, and
    only a name the holder lacks goes through ``Context.__getattr__`` (which resolves it and
    keeps it here through :meth:`Generation.keep`)."""


def check_name(name: str, reserved: Callable[[str], bool]) -> None:
    """Raise ``ValueError`` unless ``name`` can be a service attribute (``reserved(name)`` says
    whether the context class already uses it)."""
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise InvalidValueError(
            f"service name {name!r} must be a public Python identifier (no leading '_')"
        )
    if reserved(name):
        raise InvalidValueError(f"service name {name!r} would be shadowed by Context.{name}")


def publish(layer: Layer, gen: Generation, name: str, service: Any) -> Callable[[], None]:
    """Put ``service`` into ``layer``; return the undo. Raises ``ValueError`` when the layer
    already has a provider of ``name`` (a child layer may shadow it instead)."""
    services = layer.services
    if name in services:
        raise InvalidValueError(
            f"service {name!r} is already provided here; dispose the existing provider "
            "(or its plugin) first, or provide it on a child context to shadow it"
        )
    services[name] = service
    gen.bump()

    def withdraw() -> None:
        if services.get(name) is service:
            del services[name]
            gen.bump()

    return withdraw


class Resolver:
    """Per-context resolution cache: ``name -> (generation, provider, value)``. A view built by
    ``__bind__`` is kept while the same provider stays visible (views are stable per context)."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        self.cache: dict[str, tuple[int, Any, Any]] = {}

    def resolve(self, layer: Layer, gen: Generation, name: str, ctx: Any) -> Any:
        """The value of service ``name`` for ``ctx``, or :data:`MISSING`."""
        current = gen.value
        entry = self.cache.get(name)
        if entry is not None and entry[0] == current:
            return entry[2]
        service = layer.find(name)
        if service is MISSING:
            return MISSING
        if entry is not None and entry[1] is service:
            value = entry[2]
        else:
            bind = getattr(type(service), "__bind__", None)
            value = service if bind is None else bind(service, ctx)
        self.cache[name] = (current, service, value)
        return value


__all__ = ["MISSING", "CoreHolder", "Generation", "Layer", "Resolver", "check_name", "publish"]
