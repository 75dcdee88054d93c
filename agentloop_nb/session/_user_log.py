"""A user message as the log holds it, without serialising, walking and validating it again
(docs/architecture.md "Turn, session 14").

The loop logs ``message.model_dump(mode="json")`` twice for each input it takes: in the
``agent/inbox/spliced`` event that queues it and in the ``user/message`` event that enters it,
and the session derives the node ``UserMessage.model_validate`` makes of that dump. For a
message whose content blocks hold only plain ``str`` values (a reasoning block's ``signature``
may be ``None``) and whose ``source`` is a flat dict of plain ``str`` / ``int`` / ``bool`` /
``None`` values, both are fixed by the fields alone: the dump is the fields in declaration
order, and validating it gives back the same values with every field counted as set (the
``source`` a plain dict again). :func:`logged_user` builds both from the fields in that case
and answers ``None`` for anything else (a subclass, another value type, a model that does not
look like a validated one), which then takes the dump-and-parse path.

:func:`user_text_message` builds the message ``UserMessage(id=..., content=(TextBlock(text=
...),), source=...)`` makes, for the loop's own input of an exact ``str``.
"""

from __future__ import annotations

from typing import Any

from .._model_slots import built
from ..messages import TextBlock, UserMessage
from ._assistant_log import block_node, plain_block
from ._frozen import FrozenDict

__all__ = ["logged_user", "user_dump", "user_text_message"]

_MESSAGE_FIELDS = tuple(UserMessage.model_fields)
# Every field counted as set (a parsed dump names them all): one set shared by every node
# built here, as the assistant log shares its blocks' (pydantic copies a model's set before
# changing it, and the models are frozen).
_MESSAGE_SET = set(_MESSAGE_FIELDS)
# What the constructor calls below count as set: the fields they name.
_BUILT_SET = {"id", "content", "source"}
_TEXT_SET = {"text"}
_new_dict = dict.__new__
_init_dict = dict.__init__


def _frozen(items: dict[str, Any]) -> FrozenDict:
    fd: FrozenDict = _new_dict(FrozenDict)
    _init_dict(fd, items)
    return fd


def logged_user(message: Any) -> tuple[FrozenDict, UserMessage] | None:
    """``(frozen dump, node)`` of ``message``: the frozen ``message.model_dump(mode="json")``
    and what the session derives from it; ``None`` when the message's fields do not fix both
    (see the module docstring)."""
    return _logged(message, True)  # type: ignore[return-value]


def user_dump(message: Any) -> FrozenDict | None:
    """The frozen ``message.model_dump(mode="json")`` of :func:`logged_user`, without the node
    (what an ``agent/inbox/spliced`` event logs of the messages it queues)."""
    logged = _logged(message, False)
    return None if logged is None else logged[0]


def _logged(message: Any, with_node: bool) -> tuple[FrozenDict, UserMessage | None] | None:
    if type(message) is not UserMessage:
        return None
    fields = message.__dict__
    if tuple(fields) != _MESSAGE_FIELDS or fields["role"] != "user":
        return None
    if message.__pydantic_extra__ or message.__pydantic_private__:
        return None
    id_, content, source = fields["id"], fields["content"], fields["source"]
    if type(id_) is not str or type(content) is not tuple or type(source) is not dict:
        return None
    for key, value in source.items():
        t = type(value)
        if type(key) is not str or not (t is str or t is int or t is bool or value is None):
            return None
    dumped: list[FrozenDict] = []
    blocks: list[Any] = []
    for block in content:
        values = plain_block(block)
        if values is None:
            return None
        dumped.append(_frozen(values))
        if with_node:
            blocks.append(block_node(block, values))
    frozen = _frozen(
        {"role": "user", "id": id_, "content": tuple(dumped), "source": _frozen(source)}
    )
    if not with_node:
        return frozen, None
    node_fields = {"role": "user", "id": id_, "content": tuple(blocks), "source": dict(source)}
    return frozen, built(UserMessage, node_fields, _MESSAGE_SET)


def user_text_message(id: str, text: str, source: dict[str, Any]) -> UserMessage:
    """What ``UserMessage(id=id, content=(TextBlock(text=text),), source=source)`` builds, for
    an exact ``str`` id and text and a ``source`` dict nobody else holds (validation would
    pass these through, copying the dict): the same fields, the same fields counted as set."""
    block = built(TextBlock, {"type": "text", "text": text}, _TEXT_SET)
    fields = {"role": "user", "id": id, "content": (block,), "source": source}
    return built(UserMessage, fields, _BUILT_SET)
