"""``BaseModel``'s own slot setters, for the hot paths that build a model from fields they
already checked (a streamed block, an assistant message, a tool result's node).

Each is the slot descriptor's ``__set__``: a C call, where ``object.__setattr__`` first goes
through its wrapper and looks the name up on the type. A model built with them must get all
four slots, as ``BaseModel.model_construct`` sets them; its callers' tests compare what they
build with what validation builds.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["built", "set_dict", "set_extra", "set_fields_set", "set_private"]

set_dict, set_fields_set, set_extra, set_private = (
    BaseModel.__dict__[name].__set__
    for name in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    )
)


def built(cls: type, fields: dict[str, Any], fields_set: set[str]) -> Any:
    """The instance of ``cls`` holding exactly ``fields`` (every field, in declaration order,
    the values validation would hand back), ``fields_set`` counted as set (a set its callers
    may share between instances: pydantic copies it before changing it, and these models are
    frozen), no extra and no private values: what validation builds when it has nothing to
    convert."""
    obj: Any = object.__new__(cls)
    set_dict(obj, fields)
    set_fields_set(obj, fields_set)
    set_extra(obj, None)
    set_private(obj, None)
    return obj
