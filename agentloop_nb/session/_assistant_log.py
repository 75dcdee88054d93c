"""An assembled assistant message as the log holds it, without serialising and validating it
again (benchmarks/README.md "Issue 28: a tool step's own work").

The loop logs ``message.model_dump(mode="json")`` on ``assistant/message`` and the session
derives the node ``AssistantMessage.model_validate`` makes of that dump. For a message whose
every field is a plain ``str`` (a reasoning block's ``signature`` may be ``None``) both are
fixed by the fields alone: the dump is the fields, in declaration order, and validating it
gives back the same values with every field counted as set. :func:`logged_message` builds
both straight from the fields in that case, and answers ``None`` for anything else (a
subclass, a value of another type, a model built without validation that does not look like a
validated one), which then takes the dump-and-parse path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from .._model_slots import built
from ..messages import AssistantMessage, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock
from ._frozen import FrozenDict, wrap_frozen

__all__ = ["block_node", "logged_message", "plain_block"]

# Each block class's fields in declaration order (the order of a validated ``__dict__`` and of
# the dump), and its ``type`` literal.
_BLOCKS: tuple[type[BaseModel], ...] = (TextBlock, ReasoningBlock, ToolCallBlock, ImageBlock)
_FIELDS: dict[type, tuple[str, ...]] = {cls: tuple(cls.model_fields) for cls in _BLOCKS}
_LITERAL: dict[type, str] = {cls: cls.model_fields["type"].default for cls in _BLOCKS}
_MESSAGE_FIELDS = tuple(AssistantMessage.model_fields)
_NULLABLE = "signature"  # the one field a block may hold as None (ReasoningBlock's)

# A block's node has every field set: one field-name set per block class, shared by every
# node built here (pydantic copies a model's set before changing it, ``model_copy``, and the
# blocks are frozen; one set per block was a container the cyclic GC walked while it lived)
_ALL_SET: dict[type, set[str]] = {cls: set(names) for cls, names in _FIELDS.items()}
_new_dict = dict.__new__
_init_dict = dict.__init__
# The message node's, likewise (session 14: a set a step the cyclic GC walked while it lived)
_MESSAGE_SET = set(_MESSAGE_FIELDS)


def plain_block(block: Any) -> dict[str, Any] | None:
    """``block``'s fields when they alone fix its dump and its node: an exact block class,
    its fields in declaration order, every value a plain ``str`` (a reasoning block's
    ``signature`` may be ``None``), no extra and no private values; else ``None``. The one
    rule of the assistant and the user message logs."""
    cls = type(block)
    names = _FIELDS.get(cls)
    if names is None:
        return None
    values: dict[str, Any] = block.__dict__
    if tuple(values) != names or values["type"] != _LITERAL[cls]:
        return None
    for name, value in values.items():
        if type(value) is not str and (value is not None or name != _NULLABLE):
            return None
    if block.__pydantic_extra__ or block.__pydantic_private__:
        return None
    return values


def block_node(block: Any, values: dict[str, Any]) -> Any:
    """The node validation makes of the dump of ``block``, whose ``values`` passed
    :func:`plain_block`: the same values, every field set."""
    cls = type(block)
    return built(cls, dict(values), _ALL_SET[cls])


def logged_message(
    message: Any, dumps: Sequence[tuple[Any, FrozenDict]] = ()
) -> tuple[FrozenDict, AssistantMessage | None] | None:
    """``(frozen dump, node)`` of ``message``: the frozen ``message.model_dump(mode="json")``
    and what the session derives from it (``None`` for an empty message, which derives
    nothing); ``None`` when the message's fields do not fix both (see the module docstring).

    ``dumps``: ``(block, frozen)`` pairs already made of some of the message's blocks (the
    chunk log's ``block-end`` data), in content order; a block's pair is used as its dump
    when ``frozen`` holds exactly the block's fields (the same values, so the same dump), and
    the log holds one frozen block, not two alike."""
    if type(message) is not AssistantMessage:
        return None
    fields = message.__dict__
    if tuple(fields) != _MESSAGE_FIELDS or fields["role"] != "assistant":
        return None
    content = fields["content"]
    if type(content) is not tuple:
        return None
    dumped: list[FrozenDict] = []
    blocks: list[Any] = []
    known = iter(dumps)
    pair = next(known, None)
    for block in content:
        values = plain_block(block)
        if values is None:
            return None
        frozen_block: FrozenDict | None = None
        if pair is not None and pair[0] is block:
            if len(pair[1]) == len(values):  # (no ``None`` was left out of it)
                frozen_block = pair[1]  # the chunk log's frozen fields of this block
            pair = next(known, None)
        if frozen_block is None:
            # (``wrap_frozen`` inlined: a frame per block)
            frozen_block = _new_dict(FrozenDict)
            _init_dict(frozen_block, values)
        dumped.append(frozen_block)
        blocks.append(block_node(block, values))
    frozen = wrap_frozen({"role": "assistant", "content": tuple(dumped)})
    if not blocks:
        return frozen, None
    return frozen, built(
        AssistantMessage, {"role": "assistant", "content": tuple(blocks)}, _MESSAGE_SET
    )
