"""The system prompt's value types: a leaf, so the service protocols (``_service_types``)
can name them without importing the ``prompt`` service. Public through ``agentloop_nb.prompt``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
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


@dataclass(frozen=True, slots=True)
class Assembly:
    """What ``assemble`` produced for one agent and step: its sections, the schemas of the tools
    visible to it (from ``ctx.tools`` when that service exists) and its variables. The loop
    sends exactly these. ``assemble`` listeners return a modified copy (``.replace(...)``), e.g.
    to hide a tool for one step."""

    sections: tuple[Section, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    variables: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))

    def replace(self, **changes: Any) -> Assembly:
        return replace(self, **changes)


for _public in (Section, Assembly):
    _public.__module__ = "agentloop_nb.prompt"

__all__ = ["Assembly", "Section", "SectionSource", "VariableSource"]
