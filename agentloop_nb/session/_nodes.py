"""What a session's log derives and how it is read: the message of a surface event
(``parse_node``; ``parse_loaded_node`` for a loaded one, its field-name sets shared), the
read-only live view of the log (``EventLog``) and a loaded log's events with the messages the
loader parsed (``LoadedEvents``). Private to :mod:`agentloop_nb.session`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from pydantic import ValidationError

from .._event_names import ASSISTANT_MESSAGE, TOOL_RESULT
from .._model_slots import set_dict as _set_dict
from .._model_slots import set_extra as _set_extra
from .._model_slots import set_fields_set as _set_fields_set
from .._model_slots import set_private as _set_private
from ..errors import InvalidValueError
from ..messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from ._events import SessionEvent
from ._frozen import FrozenDict

__all__ = ["EventLog", "LoadedEvents", "parse_loaded_node", "parse_node", "tool_result_node"]

_type = type
_new_object = object.__new__


class EventLog(Sequence[SessionEvent]):
    """A read-only live view of a session's events (no copy; slicing returns a tuple)."""

    __slots__ = ("_events",)

    def __init__(self, events: list[SessionEvent]) -> None:
        self._events = events

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...

    def __getitem__(self, index: int | slice) -> SessionEvent | tuple[SessionEvent, ...]:
        if isinstance(index, slice):
            return tuple(self._events[index])
        return self._events[index]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[SessionEvent]:
        return iter(self._events)

    def __reversed__(self) -> Iterator[SessionEvent]:
        return reversed(self._events)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog):
            return self._events == other._events
        if isinstance(other, list | tuple):
            return self._events == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<EventLog of {len(self._events)} events>"


def parse_node(event_type: str, data: FrozenDict, seq: int) -> Message | None:
    """The message a surface event derives (``None``: an empty assistant message, skipped).

    Raises ``ValueError`` naming the event when ``data`` does not describe the message.
    """
    try:
        if event_type == TOOL_RESULT:
            node = _plain_tool_result(data)
            if node is not None:
                return node
            return ToolResultMessage(
                call_id=data["call_id"],
                name=data.get("name"),
                content=data["content"],
                is_error=data.get("is_error", False),
            )
        if event_type == ASSISTANT_MESSAGE:
            message = AssistantMessage.model_validate(data["message"])
            return message if message.content else None
        return UserMessage.model_validate(data["message"])
    except (KeyError, TypeError, ValidationError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InvalidValueError(
            f"session event {event_type!r} (seq {seq}): data does not describe a message: {detail}"
        ) from None


_TOOL_RESULT_FIELDS = {"call_id", "name", "content", "is_error"}


def _plain_tool_result(data: FrozenDict) -> ToolResultMessage | None:
    """The message of a ``tool/result`` of exact ``str`` content, call id and name and ``bool``
    is_error, built as ``model_construct`` builds it (validation would pass such values
    through unchanged; every tool call commits one); ``None`` for anything else."""
    call_id, name, content = data.get("call_id"), data.get("name"), data.get("content")
    is_error = data.get("is_error", False)
    if (
        _type(call_id) is not str
        or _type(content) is not str
        or (name is not None and _type(name) is not str)
        or _type(is_error) is not bool
    ):
        return None
    return tool_result_node(call_id, name, content, is_error)


def tool_result_node(
    call_id: str, name: str | None, content: str, is_error: bool
) -> ToolResultMessage:
    """The message of a ``tool/result`` of exact ``str`` call id, content and name (or no
    name) and ``bool`` is_error, built as ``model_construct`` builds it; the caller checks the
    types (validation would pass such values through unchanged). The loop passes it to
    ``Session.append`` as the event's node (``_node``), so the data is not read back."""
    node = _new_object(ToolResultMessage)
    fields = {
        "role": "tool",
        "call_id": call_id,
        "name": name,
        "content": content,
        "is_error": is_error,
    }
    # (``BaseModel``'s own slot setters: a C call each, ``object.__setattr__`` goes through
    # its wrapper and looks the name up on the type first; a node per pooled call)
    _set_dict(node, fields)
    # shared, as _share_fields_set shares a loaded message's (see there why that is safe)
    _set_fields_set(node, _TOOL_RESULT_FIELDS)
    _set_extra(node, None)
    _set_private(node, None)
    return node


_FIELD_SETS: dict[frozenset[str], set[str]] = {}  # one set per distinct set of field names


def _share_fields_set(model: Any) -> None:
    """Give ``model`` the one shared ``set`` equal to its ``__pydantic_fields_set__``.

    pydantic builds a fresh set per model instance (216 bytes for 2-4 names: a loaded
    session's messages and their blocks held one each, more than their ``__dict__``). The
    models are frozen, pydantic copies the set before changing it (``model_copy``), and the
    message classes have few distinct sets of names, so equal sets are shared."""
    fields = model.__pydantic_fields_set__
    key = frozenset(fields)
    shared = _FIELD_SETS.get(key)
    if shared is None:
        shared = _FIELD_SETS[key] = set(key)
    _set_model_attr(model, "__pydantic_fields_set__", shared)


_set_model_attr = object.__setattr__


def parse_loaded_node(event_type: str, data: FrozenDict, seq: int) -> Message | None:
    """:func:`parse_node` for an event read from persistence: the same message, with its
    models' field-name sets shared (see :func:`_share_fields_set`)."""
    node = parse_node(event_type, data, seq)
    if node is not None:
        _share_fields_set(node)
        content = node.content
        if type(content) is tuple:
            for block in content:
                _share_fields_set(block)
    return node


class LoadedEvents(list[SessionEvent]):
    """A loaded log's events (a plain ``list`` to every reader), carrying the messages the
    loader already parsed from its surface events (it checks each one, to report a bad line):
    ``nodes[seq] = (event, message)``. ``SessionStore.prepare`` hands them to
    ``Session.adopt_durable``, so a resumed session derives its messages without parsing
    every surface event a second time. A copy or slice is a plain list without them."""

    __slots__ = ("nodes",)

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[int, tuple[SessionEvent, Message | None]] = {}
