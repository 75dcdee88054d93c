"""``BaseModel``'s own slot setters, for the hot paths that build a model from fields they
already checked (a streamed block, an assistant message, a tool result's node).

Each is the slot descriptor's ``__set__``: a C call, where ``object.__setattr__`` first goes
through its wrapper and looks the name up on the type. A model built with them must get all
four slots, as ``BaseModel.model_construct`` sets them; its callers' tests compare what they
build with what validation builds.
"""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["set_dict", "set_extra", "set_fields_set", "set_private"]

set_dict, set_fields_set, set_extra, set_private = (
    BaseModel.__dict__[name].__set__
    for name in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    )
)
