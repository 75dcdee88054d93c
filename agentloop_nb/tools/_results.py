"""Turning a body's return value into result content, with caps that keep the event loop free.

A ``str`` is the content as it is; a pydantic model is dumped as JSON; anything else is
serialised as JSON. Serialising runs on the event loop, so before it starts the value is
walked once under three caps (a walk bounded by them takes milliseconds at most):

- **no iterators**: an iterator or generator may never end (``itertools.count()``) and would
  be consumed by serialising it; return a list (e.g. ``list(itertools.islice(it, 100))``);
- **size**: at most :data:`MAX_RESULT_CHARS` characters of text and :data:`MAX_RESULT_ITEMS`
  values in all;
- **depth**: containers nested at most :data:`MAX_RESULT_DEPTH` levels deep.

A value beyond a cap raises :class:`ResultRejected` naming the cap and how to fix it (return a
``str``, which is sent as it is, or summarise). The dispatch phase turns that into a
``TOOL_ERROR`` result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import GeneratorType
from typing import Any, Final

import pydantic_core
from pydantic import BaseModel

from ..errors import AgentloopError
from ._decisions import ToolResult, text_result

__all__ = [
    "MAX_RESULT_CHARS",
    "MAX_RESULT_DEPTH",
    "MAX_RESULT_ITEMS",
    "ResultRejected",
    "to_result",
]

#: Characters of text (strings, bytes, numbers) a structured result may hold in all.
MAX_RESULT_CHARS: Final = 2_000_000
#: Values (containers and leaves) a structured result may hold in all.
MAX_RESULT_ITEMS: Final = 200_000
#: How deep containers may nest in a structured result.
MAX_RESULT_DEPTH: Final = 100

_FIX = "return a str (sent as it is) or a summary of the data instead"
_SCALARS: Final = (bool, int, float)


class ResultRejected(TypeError, AgentloopError):
    """A body's return value cannot become result content (unserialisable or over a cap).

    A ``TypeError`` so existing handlers of unserialisable values keep working."""


def to_result(value: Any, call_id: str) -> ToolResult:
    """Turn a body's return value into a ``ToolResult`` stamped with ``call_id``.

    Raises :class:`ResultRejected` when the value holds an iterator, exceeds a cap (see the
    module docstring) or cannot be serialised as JSON.
    """
    if isinstance(value, ToolResult):
        return value if value.call_id == call_id else value.model_copy(update={"call_id": call_id})
    if isinstance(value, str):
        if type(value) is str and type(call_id) is str:
            return text_result(value, call_id)  # the same result, unvalidated: every call's
        return ToolResult(content=value, call_id=call_id)
    check_value(value)
    try:
        if isinstance(value, BaseModel):
            content = value.model_dump_json()
        else:
            content = pydantic_core.to_json(value).decode()
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError) as exc:
        raise ResultRejected(
            f"the tool returned a value that is not JSON serialisable: {exc}; {_FIX}"
        ) from None
    return ToolResult(content=content, call_id=call_id)


def check_value(value: Any) -> None:
    """Walk ``value`` (iteratively) and raise :class:`ResultRejected` at the first cap it
    breaks; types the walk does not know are left for the serialiser to accept or refuse."""
    chars = 0
    items = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        items += 1
        if items > MAX_RESULT_ITEMS:
            raise _too_many()
        if current is None or isinstance(current, _SCALARS):
            chars += 8
        elif isinstance(current, str | bytes | bytearray):
            chars += len(current)
        else:
            children = _children(current)
            if children is not None:
                if depth >= MAX_RESULT_DEPTH:
                    raise ResultRejected(
                        f"the tool's result nests containers more than {MAX_RESULT_DEPTH} "
                        f"levels deep (the cap for structured results); {_FIX}"
                    )
                stack.extend((child, depth + 1) for child in children)
        if chars > MAX_RESULT_CHARS:
            raise ResultRejected(
                f"the tool's result is larger than {MAX_RESULT_CHARS:,} characters "
                f"(the cap for structured results); {_FIX}"
            )


def _too_many() -> ResultRejected:
    return ResultRejected(
        f"the tool's result holds more than {MAX_RESULT_ITEMS:,} values "
        f"(the cap for structured results); {_FIX}"
    )


def _children(value: Any) -> list[Any] | None:
    """The values inside a container ``value`` (keys included), ``None`` for a leaf; raises
    :class:`ResultRejected` for an iterator."""
    if isinstance(value, dict | list | tuple | set | frozenset):
        if len(value) > MAX_RESULT_ITEMS:  # refuse before copying a huge container
            raise _too_many()
        return [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    if isinstance(value, BaseModel):
        return list(value.__dict__.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name) for f in dataclasses.fields(value)]
    if isinstance(value, Iterator | GeneratorType):
        raise ResultRejected(
            f"the tool returned an iterator ({type(value).__module__}.{type(value).__qualname__}),"
            " which may never end and is not serialised; return a list "
            "(e.g. list(itertools.islice(it, 100))) or a str"
        )
    return None
