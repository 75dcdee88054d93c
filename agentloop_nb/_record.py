"""``Record``: the base of the package's frozen value classes (hook payloads, catalogue entries).

A record behaves as a frozen, slotted dataclass does: its fields are set once by ``__init__``
(assigning or deleting one raises ``dataclasses.FrozenInstanceError``), it is equal to a record
of the same class with equal fields and hashed by them, its repr is ``Name(field=value, ...)``,
``match`` takes its fields by position, and ``copy`` and ``pickle`` rebuild it from its fields.
``__match_args__`` names the fields in order; ``fields_of`` lists them with their annotations.

Each subclass spells out ``__slots__``, ``__match_args__`` and an ``__init__`` that stores its
arguments with ``set_field``. That is the point of the class: ``@dataclass(frozen=True,
slots=True)`` compiles five or six methods from source for every class at import (about 3.5 M
instructions a class, a sixth of the package's own import); a hand-written ``__init__`` is
compiled once into the ``.pyc`` and costs no more per instance than the generated one.
"""

from __future__ import annotations

import inspect
from dataclasses import FrozenInstanceError
from operator import attrgetter
from typing import Any, ClassVar, NoReturn

from .errors import InvalidTypeError

__all__ = ["Record", "field_values", "fields_of", "set_field"]

set_field = object.__setattr__
"""Stores a field in ``__init__`` (records refuse ``setattr``)."""


class Record:
    """A frozen value class whose fields are ``__match_args__`` (see the module docstring)."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()
    # the fields in one C call (a scalar for a one-field record): equality and hash use it
    _key: ClassVar[Any] = attrgetter("__class__")  # a record without fields

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        slots: set[str] = set()
        for klass in cls.__mro__:
            slots.update(klass.__dict__.get("__slots__", ()))
        if set(cls.__match_args__) != slots or "__dict__" in slots:
            raise InvalidTypeError(
                f"record {cls.__qualname__}: __match_args__ {cls.__match_args__} must name "
                f"exactly its slots {sorted(slots)} (in field order)"
            )
        if cls.__match_args__:
            cls._key = attrgetter(*cls.__match_args__)
        else:
            cls._key = attrgetter("__class__")

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        key = self._key
        return bool(key(self) == key(other))

    def __hash__(self) -> int:
        return hash(self._key(self))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{type(self).__qualname__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())


def fields_of(cls: type[Record]) -> list[tuple[str, object]]:
    """``(name, annotation)`` of each field of ``cls``, in order (the annotation as written:
    a string under ``from __future__ import annotations``)."""
    notes: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        notes.update(inspect.get_annotations(klass))
    return [(name, notes.get(name, "Any")) for name in cls.__match_args__]


def field_values(record: Record) -> dict[str, Any]:
    """``{name: value}`` of each field of ``record``, in order (what ``dataclasses.asdict`` gave,
    without copying the values)."""
    return {name: getattr(record, name) for name in record.__match_args__}
