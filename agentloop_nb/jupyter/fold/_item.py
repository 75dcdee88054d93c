"""``Item``: one displayable thing of a transcript (a message, a tool call, a turn boundary...).

A leaf module (it knows the assembler and the content blocks, nothing of the transcript or the
renderers), so the fold and the renderers can both use it.

A streamed block is folded by a :class:`~agentloop_nb.llm.BlockAssembler`, the loop's own
rules. The log holds chunks as JSON, so each is rebuilt as its typed chunk first; text and
reasoning deltas, the bulk of a stream, are only collected as they arrive and handed to the
assembler as one delta of their joined text when the item is next read (a delta's text is
appended either way), so the per-token cost stays a list append.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ...errors import InvalidValueError
from ...llm import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from ...messages import ReasoningBlock, TextBlock, ToolCallBlock

# Logged chunk types a block is folded from (usage and finish describe the whole message).
CHUNK_TYPES: Mapping[str, Callable[..., StreamChunk]] = MappingProxyType(
    {
        "text-delta": TextDelta,
        "reasoning-delta": ReasoningDelta,
        "tool-call-delta": ToolCallDelta,
        "block-start": BlockStart,
        "block-end": BlockEnd,
    }
)
_TEXT_DELTAS: Mapping[str, Callable[..., StreamChunk]] = MappingProxyType(
    {"text-delta": TextDelta, "reasoning-delta": ReasoningDelta}
)


class Item:
    """One displayable thing: a message, a tool call, a turn boundary, an error...

    ``kind`` is one of ``turn-start``, ``user``, ``assistant``, ``reasoning``, ``tool``,
    ``usage``, ``error``, ``retry``, ``turn-end``; ``data`` holds its fields. A streamed block
    (assistant/reasoning text, a tool call) is folded by its ``assembler``; an item built from a
    logged message keeps its text in ``parts``.
    """

    __slots__ = (
        "_built",
        "_pending",
        "_pending_type",
        "assembler",
        "data",
        "html",
        "index",
        "kind",
        "parts",
        "told",
        "turn",
    )

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
        self._pending: list[str] = []  # delta texts not handed to the assembler yet
        self._pending_type = ("", 0)  # (chunk type, block index) of those deltas
        self.html: str | None = None  # render cache, cleared on change
        # Set by the transcript when it marks this item changed for its readers (a feed tells
        # its views); cleared by every read of the text (``fold``, ``text_from``). While set,
        # whoever was told has not read the item yet and will read all of it, so a further
        # delta needs no marking (see ``Transcript.feed_chunk``).
        self.told = False

    @property
    def text(self) -> str:
        """The text shown: assistant/reasoning text or a tool call's raw arguments (see
        :meth:`fold`)."""
        return self.fold()

    def feed(self, chunk: Mapping[str, Any]) -> bool:
        """Fold one logged chunk of this item's block (the hot path). Returns ``False`` (and
        changes nothing) for a chunk type that is not part of a block or a malformed chunk."""
        assembler = self.assembler
        if assembler is None:
            raise InvalidValueError(f"item {self.index} ({self.kind}) is not a streamed block")
        ctype = chunk["type"]
        if ctype in _TEXT_DELTAS:
            key = (ctype, chunk["index"])
            if key != self._pending_type:
                self._flush(assembler)
                self._pending_type = key
            self._pending.append(chunk["text"])
            return True
        make = CHUNK_TYPES.get(ctype)
        if make is None:
            return False
        try:
            typed = make(**chunk)
        except ValueError:  # a malformed logged chunk: show what the rest of the log says
            return False
        self._flush(assembler)
        assembler.feed(typed)
        return True

    def _flush(self, assembler: BlockAssembler) -> None:
        pending = self._pending
        if pending:
            ctype, index = self._pending_type
            assembler.feed(_TEXT_DELTAS[ctype](index=index, text="".join(pending)))
            pending.clear()

    def fold(self) -> str:
        """Return ``text``. A streamed block's text is built from its assembler (cached until
        another chunk is fed), and a streamed tool call's ``data["call_id"]`` /
        ``data["name"]`` are filled in from it once known."""
        self.told = False
        assembler = self.assembler
        if assembler is None:
            parts = self.parts
            if len(parts) > 1:
                parts[:] = ["".join(parts)]  # amortise: later renders join only what is new
            return parts[0] if parts else ""
        self._flush(assembler)
        seen = assembler.chunks_seen
        if self._built[0] == seen:
            return self._built[1]
        text = assembler.streamed_text()  # a text being streamed: no message built
        if text is not None:
            self._built = (seen, text)
            return text
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

    def text_from(self, start: int) -> tuple[int, str]:
        """``(len(text), text[start:])``. For a text being streamed only what lies past
        ``start`` is joined (see :meth:`BlockAssembler.streamed_tail`): a view showing a long
        answer in segments reads its last segment each render, not the whole answer."""
        self.told = False
        assembler = self.assembler
        if assembler is not None:
            self._flush(assembler)
            got = assembler.streamed_tail(start)
            if got is not None:
                return got
        text = self.fold()
        return len(text), text[start:]

    def __repr__(self) -> str:
        return f"<Item {self.index} {self.kind} turn={self.turn} {self.data!r}>"


__all__ = ["Item"]
