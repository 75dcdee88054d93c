"""Frozen slotted instances built without a setter call per field (benchmarks/README.md "Step
(session 14)").

A frozen slotted class refuses ``setattr`` (its ``__setattr__`` raises), so a hot path that builds
one stores each field through the slot's own setter: a C call, but one that builds an argument
tuple and unpacks it again (about 700 instructions under callgrind). A *twin* is a private class
with exactly the frozen class's slots and no ``__setattr__`` of its own: its ``__init__`` stores
the fields with plain attribute stores (a few dozen instructions each), then makes the instance one
of the frozen class with a plain ``self.__class__ = cls`` store (the twin has no ``__setattr__`` of
its own, so the store reaches the ``__class__`` setter directly; ``object.__setattr__(self,
"__class__", cls)`` costs about 800 instructions more). CPython allows that only between classes of
the same layout (the same slots, the same base), so a twin that drifts from its class fails at its
first use; :func:`same_slots` is what its test checks. The result is what the frozen class's
constructor makes: an instance of that class with every slot set, and nothing else.
"""

from __future__ import annotations

__all__ = ["same_slots"]


def _slots(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return names


def same_slots(twin: type, cls: type) -> bool:
    """Whether ``twin`` has exactly ``cls``'s slots, neither a ``__dict__``, and ``twin`` no
    ``__setattr__`` of its own (its stores must be plain ones)."""
    return (
        _slots(twin) == _slots(cls)
        and "__dict__" not in _slots(cls)
        and twin.__setattr__ is object.__setattr__
    )
