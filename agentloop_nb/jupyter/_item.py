"""``Item``: one displayable thing of a transcript (a message, a tool call, a turn boundary...).

A leaf module (it knows the assembler and the content blocks, nothing of the transcript or the
renderers), so the fold and the renderers can both use it.
"""

from __future__ import annotations

from typing import Any

from ..llm import BlockAssembler
from ..messages import ReasoningBlock, TextBlock, ToolCallBlock


class Item:
    """One displayable thing: a message, a tool call, a turn boundary, an error...

    ``kind`` is one of ``turn-start``, ``user``, ``assistant``, ``reasoning``, ``tool``,
    ``usage``, ``error``, ``retry``, ``turn-end``; ``data`` holds its fields. A streamed block
    (assistant/reasoning text, a tool call) is folded by its ``assembler``; an item built from a
    logged message keeps its text in ``parts``.
    """

    __slots__ = ("_built", "assembler", "data", "html", "index", "kind", "parts", "turn")

    def __init__(
        self,
        index: int,
        kind: str,
        turn: int,
        data: dict[str, Any],
        assembler: BlockAssembler | None = None,
    ) -> None:
        self.index = index
        self.kind = kind
        self.turn = turn
        self.data = data
        self.parts: list[str] = []
        self.assembler = assembler
        self._built: tuple[int, str] = (-1, "")  # (chunks folded, text) of the last build
        self.html: str | None = None  # render cache, cleared on change

    @property
    def text(self) -> str:
        """The text shown: assistant/reasoning text or a tool call's raw arguments (see
        :meth:`fold`)."""
        return self.fold()

    def fold(self) -> str:
        """Return ``text``. A streamed block's text is built from its assembler (cached until
        another chunk is fed), and a streamed tool call's ``data["call_id"]`` /
        ``data["name"]`` are filled in from it once known."""
        assembler = self.assembler
        if assembler is None:
            parts = self.parts
            if len(parts) > 1:
                parts[:] = ["".join(parts)]  # amortise: later renders join only what is new
            return parts[0] if parts else ""
        seen = assembler.chunks_seen
        if self._built[0] == seen:
            return self._built[1]
        content = assembler.message().content  # this block alone: at most one content block
        block = content[0] if content else None
        text = ""
        if isinstance(block, ToolCallBlock):
            text = block.arguments
            d = self.data
            d["call_id"] = d.get("call_id") or block.id
            d["name"] = d.get("name") or block.name
        elif isinstance(block, TextBlock | ReasoningBlock):
            text = block.text
        self._built = (seen, text)
        return text

    def __repr__(self) -> str:
        return f"<Item {self.index} {self.kind} turn={self.turn} {self.data!r}>"


__all__ = ["Item"]
