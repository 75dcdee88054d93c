"""``Record``: the base of the package's frozen value classes (hook payloads, catalogue entries);
``MutableRecord``: the same for mutable values.

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

A ``MutableRecord`` is what a mutable slotted dataclass is: its fields can be assigned, it is
equal to one of the same class with equal fields, unhashable, and shown as
``Name(field=value, ...)`` without the fields its class names in ``_repr_hidden`` (big or
private values). Its subclasses spell out ``__slots__``, ``__match_args__`` and ``__init__`` too.
"""

from __future__ import annotations

import inspect
from dataclasses import FrozenInstanceError
from operator import attrgetter
from typing import Any, ClassVar, NoReturn

from .errors import InvalidTypeError

__all__ = ["MutableRecord", "Record", "field_values", "fields_of", "set_field"]

set_field = object.__setattr__
"""Stores a field in ``__init__`` (records refuse ``setattr``)."""


def _fields_key(cls: type, kind: str) -> Any:
    """Checks that ``cls.__match_args__`` names exactly the slots of ``cls`` (no ``__dict__``)
    and returns the getter of its fields (one C call; a scalar for one field)."""
    slots: set[str] = set()
    for klass in cls.__mro__:
        slots.update(klass.__dict__.get("__slots__", ()))
    fields: tuple[str, ...] = cls.__match_args__  # type: ignore[attr-defined]
    if set(fields) != slots or "__dict__" in slots:
        raise InvalidTypeError(
            f"{kind} {cls.__qualname__}: __match_args__ {fields} must name "
            f"exactly its slots {sorted(slots)} (in field order)"
        )
    return attrgetter(*fields) if fields else attrgetter("__class__")


class Record:
    """A frozen value class whose fields are ``__match_args__`` (see the module docstring)."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()
    # the fields in one C call (a scalar for a one-field record): equality and hash use it
    _key: ClassVar[Any] = attrgetter("__class__")  # a record without fields

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._key = _fields_key(cls, "record")

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


class MutableRecord:
    """A mutable value class whose fields are ``__match_args__`` (see the module docstring)."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()
    #: Fields the repr leaves out (big or private values); equality still compares them.
    _repr_hidden: ClassVar[tuple[str, ...]] = ()
    _key: ClassVar[Any] = attrgetter("__class__")
    _shown: ClassVar[tuple[str, ...]] = ()  # the fields the repr shows, in order

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._key = _fields_key(cls, "mutable record")
        unknown = set(cls._repr_hidden) - set(cls.__match_args__)
        if unknown:
            raise InvalidTypeError(
                f"mutable record {cls.__qualname__}: _repr_hidden names {sorted(unknown)}, "
                f"which are not among its fields {cls.__match_args__}"
            )
        cls._shown = tuple(n for n in cls.__match_args__ if n not in cls._repr_hidden)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        key = self._key
        return bool(key(self) == key(other))

    # mutable: unhashable, as a mutable dataclass is
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__qualname__}({fields})"


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
