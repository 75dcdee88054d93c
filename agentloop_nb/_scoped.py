"""Agent-scoped registries and per-context service views: the one mechanism behind every
registry a plugin can add to through ``ctx`` (tools, prompt sections and variables, ...).

- :class:`ScopedRegistry` maps names to entries that are either *global* (``agent=None``) or
  *scoped* to one agent. An agent sees its own entry of a name in preference to the global one
  (shadowing, for that agent only); other agents never see it. ``unique=True`` refuses a second
  live entry of a name in the same scope; otherwise the latest entry wins and disposing it
  reveals the previous one (re-running a notebook cell replaces, never stacks).
- :func:`owned` runs a registration through a context: its disposer is owned by that context's
  scope (disposed with it).
- :class:`BoundView` is the base of a service's view from one context (what ``ctx.<service>``
  returns when the service defines ``__bind__``): it knows ``service``, ``ctx`` and ``agent``,
  routes registrations through :meth:`BoundView.own`, and forwards every other public attribute
  to the service. :class:`Bindable` gives a service the matching ``__bind__``.
- :class:`OwnedCopy` is the other ``__bind__``: for a service whose view must keep its type
  (``ctx.tools``, ``ctx.mcp``), the view is a copy sharing all state but its owning context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, Self, TypeVar

from ._disposer import Disposer
from .errors import InvalidValueError

T = TypeVar("T")
S = TypeVar("S")


class _Entry(Generic[T]):
    __slots__ = ("agent", "value")

    def __init__(self, value: T, agent: object) -> None:
        self.value = value
        self.agent = agent


class ScopedRegistry(Generic[T]):
    """Name → global and agent-scoped entries (see the module docstring).

    ``kind`` names the entries in error messages (e.g. ``"tool"``). Agents are compared by
    identity. Not thread-safe: use it from the event loop.
    """

    __slots__ = ("_first_seen", "_seen", "_stacks", "_version", "kind", "unique")

    def __init__(self, kind: str, *, unique: bool = False) -> None:
        self.kind = kind
        self.unique = unique
        # name -> entries, oldest first; a name leaves the dict when its last entry goes.
        self._stacks: dict[str, list[_Entry[T]]] = {}
        self._first_seen: dict[str, int] = {}
        # Bumped by every add/remove. ``visible`` runs several times per model step and the
        # registry rarely changes: its last answer is kept with the version and agent it
        # answered (one entry, so it keeps at most one agent alive).
        self._version = 0
        self._seen: tuple[int, object, tuple[tuple[str, T], ...]] | None = None

    def taken(self, name: str, agent: object = None) -> bool:
        """Whether ``name`` has a live entry in exactly ``agent``'s scope (``None``: global)."""
        return any(e.agent is agent for e in self._stacks.get(name, ()))

    def add(self, name: str, value: T, agent: object = None) -> Disposer:
        """Add an entry for ``agent`` (``None``: global); return the disposer that removes
        exactly this entry (a stale disposer never removes a newer one). Raises ``ValueError``
        for a taken name when the registry is ``unique``."""
        if self.unique and self.taken(name, agent):
            where = "" if agent is None else f" for agent {getattr(agent, 'id', agent)!r}"
            raise InvalidValueError(
                f"{self.kind} {name!r} is already registered{where}; dispose the existing "
                "registration first"
            )
        self._first_seen.setdefault(name, len(self._first_seen))
        stack = self._stacks.setdefault(name, [])
        entry = _Entry(value, agent)
        stack.append(entry)
        self._version += 1
        stacks = self._stacks

        def remove() -> None:
            for i, e in enumerate(stack):
                if e is entry:
                    del stack[i]
                    self._version += 1
                    break
            if not stack and stacks.get(name) is stack:
                del stacks[name]

        return Disposer(remove)

    def add_through(self, ctx: Any, name: str, value: T) -> Disposer:
        """:meth:`add` through a context: scoped to ``ctx.agent`` and owned by ``ctx``'s scope
        (``ctx=None`` registers globally with a plain disposer)."""
        agent = None if ctx is None else getattr(ctx, "agent", None)
        return owned(ctx, lambda: self.add(name, value, agent))

    def lookup(self, name: str, agent: object = None) -> T | None:
        """The value ``agent`` sees for ``name`` (its own latest, else the latest global)."""
        stack = self._stacks.get(name)
        if stack is not None and len(stack) == 1:
            # fast path (the loop looks a tool up twice per call): a lone entry wins when it
            # is global or this agent's, as _winner decides, without its frame
            entry = stack[0]
            owner = entry.agent
            if owner is None or (agent is not None and owner is agent):
                return entry.value
            return None
        found = self._winner(stack, agent)
        return None if found is None else found.value

    def visible(self, agent: object = None) -> tuple[tuple[str, T], ...]:
        """``(name, value)`` of every name ``agent`` sees: names with a global entry first, in
        the order their entries were added (an agent's shadowing entry takes its global
        namesake's place), then the agent's own names."""
        seen = self._seen
        if seen is not None and seen[0] == self._version and seen[1] is agent:
            return seen[2]
        shared: list[tuple[str, T]] = []
        own: list[tuple[str, T]] = []
        for name, stack in self._stacks.items():
            winner = self._winner(stack, agent)
            if winner is None:
                continue
            has_global = winner.agent is None or any(e.agent is None for e in stack)
            (shared if has_global else own).append((name, winner.value))
        shared.extend(own)
        answer = tuple(shared)
        self._seen = (self._version, agent, answer)
        return answer

    def names(self) -> Iterator[str]:
        """Every name with a live entry, in any scope."""
        return iter(list(self._stacks))

    def position(self, name: str) -> int:
        """The rank of the first registration ever made of ``name`` (stable across
        replacement and shadowing; used to keep a rendered order byte-stable)."""
        return self._first_seen[name]

    @staticmethod
    def _winner(stack: list[_Entry[T]] | None, agent: object) -> _Entry[T] | None:
        if not stack:
            return None
        fallback: _Entry[T] | None = None
        for entry in reversed(stack):
            if entry.agent is None:
                if agent is None:
                    return entry
                if fallback is None:
                    fallback = entry
            elif agent is not None and entry.agent is agent:
                return entry
        return fallback

    def __repr__(self) -> str:
        return f"<ScopedRegistry {self.kind!r} names={list(self._stacks)}>"


Teardown = Callable[[], Any]


def owned(ctx: Any, add: Callable[[], Teardown | None]) -> Disposer:
    """Run the registration ``add()`` now; it returns its undo (e.g. a :class:`Disposer`, any
    callable, or ``None``). Through a context (``ctx`` not ``None``) the undo is owned by that
    context's scope; the returned disposer runs it early. Raises ``InactiveContextError`` when
    that scope was disposed (nothing is registered then)."""
    if ctx is None:
        undo = add()
        return undo if isinstance(undo, Disposer) else Disposer(undo)
    disposer: Disposer = ctx.effect(add)
    return disposer


class BoundView(Generic[S]):
    """A service seen from one context (see the module docstring). Subclasses override the
    registration methods (routing them through :meth:`own`) and the methods that dispatch
    through the context; everything else public is the service's own attribute."""

    __slots__ = ("ctx", "service")

    def __init__(self, service: S, ctx: Any) -> None:
        self.service = service
        self.ctx = ctx

    @property
    def agent(self) -> Any:
        """The agent the context is scoped to, or ``None``."""
        return getattr(self.ctx, "agent", None)

    def own(self, add: Callable[[], Teardown | None]) -> Disposer:
        """Run a registration now, owned by the context's scope (see :func:`owned`)."""
        return owned(self.ctx, add)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.service, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.service!r} via {self.ctx!r}>"


class Bindable:
    """Mixin for a service: ``ctx.<service>`` resolves to ``View(service, ctx)``."""

    __slots__ = ()

    View: ClassVar[type[BoundView[Any]]] = BoundView

    def __bind__(self, ctx: Any) -> BoundView[Any]:
        return self.View(self, ctx)


class OwnedCopy:
    """Mixin for a slotted service whose view from a context is a copy of itself: the view
    shares every slot with the service except ``_owner``, which is ``None`` on the service
    and the binding context on a view (it owns the view's registrations). So ``ctx.<service>``
    keeps the service's type and methods, and a method tells the two apart by ``_owner``.

    The subclass declares ``_owner`` in its ``__slots__`` and sets it to ``None`` in
    ``__init__``; every other slot must be shared state (set once, never rebound)."""

    __slots__ = ()

    _shared_slots: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name != "_owner" and name not in names:
                    names.append(name)
        cls._shared_slots = tuple(names)

    def __bind__(self, ctx: Any) -> Self:
        view = object.__new__(type(self))
        for name in self._shared_slots:
            object.__setattr__(view, name, getattr(self, name))
        object.__setattr__(view, "_owner", ctx)
        return view


__all__ = ["Bindable", "BoundView", "OwnedCopy", "ScopedRegistry", "owned"]
