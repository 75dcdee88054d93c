"""``BlockAssembler``: folds a chunk stream into the ``AssistantMessage`` it describes.

Rules (the loop relies on them):

- text and reasoning deltas accumulate per block ``index``; tool-call deltas accumulate by index:
  the first non-empty ``id`` / ``name`` wins (providers that repeat them in every delta must not
  produce ``"c1c1c1"``) and ``arguments_delta`` pieces are concatenated;
- a ``block-end`` that carries a ``block`` uses it as-is (it holds what deltas cannot, e.g. a
  reasoning signature); without one the block is built from its deltas;
- content is returned in index order; text and reasoning blocks that stayed empty (and carry no
  signature) are left out, since providers reject empty text blocks when they are sent back;
- on a ``max-tokens`` finish every tool call is dropped (it may be cut off and is never run);
- ``message(interrupted=True)`` drops tool calls that never saw their ``block-end`` but keeps
  partial text and reasoning.

The last ``usage`` chunk wins (adapters send cumulative usage). Chunks are trusted: nothing is
validated per chunk, this is on the streaming hot path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._model_slots import built
from .._model_slots import set_dict as _set_dict
from .._model_slots import set_extra as _set_extra
from .._model_slots import set_fields_set as _set_fields_set
from .._model_slots import set_private as _set_private
from ..messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from ._chunks import (
    Aborted,
    BlockEnd,
    BlockStart,
    ErrorFinish,
    Finish,
    FinishReason,
    MaxTokens,
    ReasoningDelta,
    Stop,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
    UsageChunk,
)

_TEXT_KINDS = frozenset({"text", "reasoning"})
# The exact finish reasons that are not ``MaxTokens`` (a subclass of one is checked as usual).
_NOT_MAX_TOKENS = frozenset({Stop, ToolCalls, Aborted, ErrorFinish})

_new = object.__new__
# One field-name set per class, shared by every block or message built below: pydantic copies
# a model's set before changing it (``model_copy``) and the models are frozen.
_CALL_SET = {"id", "name", "arguments"}
_TEXT_SET = {"text"}
_MESSAGE_SET = {"content"}
# The exact block classes and their ``type``: validating an ``AssistantMessage`` hands an
# instance of one of them back as it is (pydantic's default: instances are not revalidated).
_BLOCK_TYPES: dict[type, str] = {
    cls: cls.model_fields["type"].default
    for cls in (TextBlock, ReasoningBlock, ToolCallBlock, ImageBlock)
}


class _Partial:
    """One block being assembled."""

    __slots__ = ("block", "ended", "head", "id", "kind", "name", "parts", "pieces")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.parts: list[str] = []
        # ``streamed_tail``'s split: the first ``pieces`` parts hold the first ``head``
        # characters (joined a segment at a time, never again); the rest lies past them.
        self.pieces = 0
        self.head = 0
        self.id = ""
        self.name = ""
        self.ended = False
        self.block: ContentBlock | None = None

    def build(self) -> ContentBlock | None:
        if self.block is not None:
            return self.block
        text = "".join(self.parts)  # an exact str, whatever the parts were
        # fast path (benchmarks/README.md "Step and pool (session 8)"): exact strs, built as
        # validation builds them (a 1,000-call message validated a block per call)
        kind = self.kind
        if kind == "tool-call":
            id, name = self.id, self.name
            if type(id) is str and type(name) is str:
                # (``built`` inlined: a frame per tool call of the message)
                block: Any = _new(ToolCallBlock)
                _set_dict(block, {"type": "tool-call", "id": id, "name": name, "arguments": text})
                _set_fields_set(block, _CALL_SET)
                _set_extra(block, None)
                _set_private(block, None)
                return block
            return ToolCallBlock(id=id, name=name, arguments=text)
        if not text:
            return None
        if kind == "reasoning":
            fields: dict[str, Any] = {"type": "reasoning", "text": text, "signature": None}
            return built(ReasoningBlock, fields, _TEXT_SET)
        return built(TextBlock, {"type": "text", "text": text}, _TEXT_SET)


class BlockAssembler:
    """Feed chunks in stream order, then ask for the ``message``.

    ``feed`` never raises for well-typed chunks; ``message`` can be called at any point (it
    builds a fresh ``AssistantMessage`` from what has been fed so far).
    """

    __slots__ = ("_blocks", "_chunks_seen", "_finish", "_usage")

    def __init__(self) -> None:
        self._blocks: dict[int, _Partial] = {}
        self._usage: Usage | None = None
        self._finish: FinishReason | None = None
        self._chunks_seen = 0

    @property
    def usage(self) -> Usage | None:
        """The last ``usage`` seen, or ``None``."""
        return self._usage

    @property
    def finish(self) -> FinishReason | None:
        """The finish reason, once the ``finish`` chunk has been fed."""
        return self._finish

    @property
    def chunks_seen(self) -> int:
        return self._chunks_seen

    def feed(self, chunk: StreamChunk) -> None:
        """Fold one chunk in. Dispatch is on the exact chunk class (a subclass of a chunk
        model, or anything else, is counted and otherwise ignored), every kind handled here
        in one frame (benchmarks/README.md "Step (session 12)": a handler method per chunk
        was a second frame for every streamed token)."""
        self._chunks_seen += 1
        c: Any = chunk
        cls = type(c)
        blocks = self._blocks
        # An exact chunk class's fields are its ``__dict__``: read through it (a pydantic
        # model's attribute goes through its Python-level ``__getattr__`` hook, ~4x a dict
        # lookup; a tool call's deltas read five or six)
        if cls is TextDelta or cls is ReasoningDelta:
            fields = c.__dict__
            index = fields["index"]
            partial = blocks.get(index)
            if partial is None:
                partial = blocks[index] = _Partial("text" if cls is TextDelta else "reasoning")
            partial.parts.append(fields["text"])
        elif cls is ToolCallDelta:
            fields = c.__dict__
            index = fields["index"]
            partial = blocks.get(index)
            if partial is None:
                partial = blocks[index] = _Partial("tool-call")
            if not partial.id:
                partial.id = fields["id"]  # (stays falsy while the deltas carry none)
            if not partial.name:
                name = fields["name"]
                if name:
                    partial.name = name
            delta = fields["arguments_delta"]
            if delta:
                partial.parts.append(delta)
        elif cls is BlockStart:
            fields = c.__dict__
            index = fields["index"]
            partial = blocks.get(index)
            if partial is None:
                blocks[index] = _Partial(fields["block_type"])
            else:
                partial.kind = fields["block_type"]
        elif cls is BlockEnd:
            fields = c.__dict__
            block = fields["block"]
            index = fields["index"]
            partial = blocks.get(index)
            if partial is None:
                if block is None:
                    return  # an end for a block that never started and carries nothing
                partial = blocks[index] = _Partial(block.type)
            partial.ended = True
            if block is not None:
                partial.kind = block.type
                partial.block = block
        elif cls is UsageChunk:
            self._usage = c.usage  # the last one wins (adapters send cumulative usage)
        elif cls is Finish:
            self._finish = c.reason

    def calls_tools(self) -> bool:
        """Whether a tool-call block was fed: unless a ``max-tokens`` finish or an interrupted
        stream drops it, the message holds a tool call (the finish a message implies)."""
        # (a loop, not ``any()``: no generator frame, once a response)
        for partial in self._blocks.values():  # noqa: SIM110
            if partial.kind == "tool-call":
                return True
        return False

    def block(self, index: int) -> ContentBlock | None:
        """Block ``index`` as assembled so far (the carried block of a ``block-end`` that had
        one), or ``None`` when no chunk of it was fed or it stayed empty. A block that has
        ended is built once: ``message`` reuses it."""
        partial = self._blocks.get(index)
        if partial is None:
            return None
        block = partial.build()
        if partial.ended:
            partial.block = block
        return block

    def streamed_text(self) -> str | None:
        """The text so far when the only block fed is a text or reasoning block built from its
        deltas (what ``message()``'s one block would hold, ``""`` while empty); ``None`` for
        anything else (ask ``message``). The parts are kept joined, so each call joins only
        what arrived since the last one, and no message is built (a view streaming a long
        answer asks :meth:`streamed_tail`, which does not copy the whole text either)."""
        partial = self._streamed_partial()
        if partial is None:
            return None
        parts = partial.parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
            partial.pieces = partial.head = 0
        return parts[0] if parts else ""

    def _streamed_partial(self) -> _Partial | None:
        """The one block fed when it is a text or reasoning block still built from deltas."""
        blocks = self._blocks
        if len(blocks) != 1:
            return None
        (partial,) = blocks.values()
        if partial.block is not None or partial.kind not in _TEXT_KINDS:
            return None
        return partial

    def streamed_tail(self, start: int) -> tuple[int, str] | None:
        """``(len(text), text[start:])`` for the ``text`` :meth:`streamed_text` returns, or
        ``None`` where that is ``None``. Joins only what lies past the last ``start`` asked
        for: a view that shows a long answer in segments asks for the text from its last
        segment's start, and each call costs what arrived since plus that segment, not the
        whole answer (``streamed_text`` copies all of it, which for an answer of a few
        hundred kilobytes is most of a render's time). ``start`` may move back (then the
        parts are joined once again)."""
        partial = self._streamed_partial()
        if partial is None:
            return None
        parts = partial.parts
        if start < partial.head:  # before the split (asked for again from further back)
            parts[:] = ["".join(parts)]
            partial.pieces = partial.head = 0
        pieces, head = partial.pieces, partial.head
        rest = parts[pieces:]
        tail = rest[0] if len(rest) == 1 else "".join(rest)
        n = head + len(tail)
        keep = start - head
        if 0 < keep < len(tail):  # split at ``start``: what lies before it is never joined again
            parts[pieces:] = [tail[:keep], tail[keep:]]
            partial.pieces, partial.head = pieces + 1, start
            return n, parts[-1]
        if len(rest) > 1:
            parts[pieces:] = [tail]
        return n, tail[keep:] if keep > 0 else tail

    def message(self, *, interrupted: bool = False) -> AssistantMessage:
        """The assembled message (see the module docstring for what is dropped)."""
        finish = self._finish
        # Exact classes first: ``isinstance`` on a pydantic model is an ABC check.
        drop_calls = type(finish) not in _NOT_MAX_TOKENS and isinstance(finish, MaxTokens)
        content: list[ContentBlock] = []
        blocks = self._blocks
        for index in sorted(blocks):
            partial = blocks[index]
            if partial.kind == "tool-call" and (drop_calls or (interrupted and not partial.ended)):
                continue
            block = partial.block  # (an ended block built already: no ``build`` frame)
            if block is None:
                block = partial.build()
                if block is None:
                    continue
            if type(block) is ToolCallBlock and drop_calls:
                continue
            content.append(block)
        for block in content:
            if _BLOCK_TYPES.get(type(block)) != block.type:  # a subclass, or an odd model
                return AssistantMessage(content=tuple(content))
        # fast path (see ``build``): validation would hand every block back as it is
        fields = {"role": "assistant", "content": tuple(content)}
        return built(AssistantMessage, fields, _MESSAGE_SET)


def assemble(
    chunks: Iterable[StreamChunk], *, interrupted: bool = False
) -> tuple[AssistantMessage, Usage | None, FinishReason | None]:
    """Fold ``chunks`` in one go: ``(message, usage, finish_reason)``."""
    assembler = BlockAssembler()
    feed = assembler.feed
    for chunk in chunks:
        feed(chunk)
    return assembler.message(interrupted=interrupted), assembler.usage, assembler.finish
