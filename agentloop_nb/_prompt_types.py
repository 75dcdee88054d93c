"""The system prompt's value types: a leaf, so the service protocols (``_service_types``)
can name them without importing the ``prompt`` service. Public through ``agentloop_nb.prompt``
(``Assembly`` is in ``_assembly``: it loads with the first assembly)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from ._record import Record, set_field

SectionSource: TypeAlias = str | Callable[[Any], str | None]
VariableSource: TypeAlias = Callable[[Any], str | None]


class Section(Record):
    """One resolved section of an assembly."""

    __slots__ = ("name", "order", "text")
    __match_args__ = ("name", "text", "order")

    name: str
    text: str
    order: int

    def __init__(self, name: str, text: str, order: int = 0) -> None:
        set_field(self, "name", name)
        set_field(self, "text", text)
        set_field(self, "order", order)


Section.__module__ = "agentloop_nb.prompt"

__all__ = ["Section", "SectionSource", "VariableSource"]
