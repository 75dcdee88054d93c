"""``Assembly`` (what the system prompt's ``assemble`` produced) and ``AssemblePayload`` (the
``system-prompt/assemble`` waterfall's payload). Public through ``agentloop_nb.prompt`` (and the
payload through ``agentloop_nb.hooks``), which load this module with the first assembly or the
first access: ``Assembly`` is a dataclass (``dataclasses.replace`` is its documented copy), and
a dataclass compiles its generated methods when the class is made (about 5 M instructions),
which ``import agentloop_nb`` and ``%load_ext`` would otherwise pay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ._prompt_types import Section
from ._record import Record, set_field

__all__ = ["AssemblePayload", "Assembly", "keep_text", "kept_text", "own"]

_UNRENDERED: Any = object()  # ``_text`` of an owned assembly not rendered yet
_set = object.__setattr__  # ``Assembly`` is frozen


@dataclass(frozen=True, slots=True)
class Assembly:
    """What ``assemble`` produced for one agent and step: its sections, the schemas of the tools
    visible to it (from ``ctx.tools`` when that service exists) and its variables. The loop
    sends exactly these. ``assemble`` listeners return a modified copy (``.replace(...)``), e.g.
    to hide a tool for one step."""

    sections: tuple[Section, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    variables: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    # The rendered text, kept only for an assembly ``SystemPrompt.collect`` built (its
    # variables are a mapping nobody else holds, so its text cannot change): ``None`` for any
    # other (a copy from ``replace`` or a caller's own, which may wrap a dict its maker still
    # changes), ``_UNRENDERED`` until the first render. Written only through :func:`own` and
    # :func:`keep_text`; not part of equality, hashing or the repr.
    _text: Any = field(default=None, init=False, repr=False, compare=False)

    def replace(self, **changes: Any) -> Assembly:
        return replace(self, **changes)


def own(assembly: Assembly) -> None:
    """Mark ``assembly`` as one whose text cannot change (``SystemPrompt.collect`` built it,
    with a variables mapping nobody else holds): its first render is kept."""
    _set(assembly, "_text", _UNRENDERED)


def kept_text(assembly: Assembly) -> str | None:
    """The text kept for an owned ``assembly`` (``None``: render it)."""
    kept = assembly._text
    return None if kept is _UNRENDERED else kept


def keep_text(assembly: Assembly, text: str) -> None:
    """Keep ``text`` as the render of ``assembly`` if it is owned (else nothing)."""
    if assembly._text is not None:
        _set(assembly, "_text", text)


class AssemblePayload(Record):
    """Payload of the ``system-prompt/assemble`` waterfall; listeners return an ``Assembly``."""

    __slots__ = ("agent", "assembly")
    __match_args__ = ("assembly", "agent")

    assembly: Assembly
    agent: Any

    def __init__(self, assembly: Assembly, agent: Any) -> None:
        set_field(self, "assembly", assembly)
        set_field(self, "agent", agent)


# Their public path: reprs, docs and pickles name it, and type hints resolve there (the
# ``prompt`` module binds both names when it loads this one).
for _public in (Assembly, AssemblePayload):
    _public.__module__ = "agentloop_nb.prompt"
