"""A ``request/header`` event's data, frozen without walking the tool schemas it logged before.

An agent logs a header at its first request and whenever the header changes; ``Session.append``
would check and freeze it with the walk, about 23 k instructions a small tool schema (most of a
header's 68 k with two tools), although the same schema dicts go into every agent's first header
(``Tool.schema()`` returns one dict while the tool's attributes stand). :func:`frozen_header`
builds the same frozen data, taking each schema's frozen copy from the last time that dict was
frozen when its content is provably what it was then (see :func:`_frozen_schema`).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..session._frozen import FrozenDict, freeze_plain_dict, wrap_frozen

# id(schema) -> (schema, its JSON text, a plain copy of it, its frozen copy), as last frozen.
# The schema is held, so an id is never another live dict's; bounded (cleared when full), so
# schemas of tools defined again and again are not kept for ever.
_SCHEMAS: dict[int, tuple[dict[str, Any], bytes, Any, FrozenDict]] = {}
_LIMIT = 512


def frozen_header(header: dict[str, Any], reason: str) -> FrozenDict | None:
    """``{"header": header, "reason": reason}`` frozen as ``Session.append`` would freeze it,
    for a header of the loop's shape (``config`` frozen, ``system`` a ``str``, ``tools`` a list
    of exact dicts, ``adapter_defaults`` a list of ``str``); ``None`` for anything else (the
    append's walk then checks it and names what is wrong)."""
    frozen: dict[str, Any] = {}
    for key, value in header.items():
        kind = type(value)
        if kind is FrozenDict or kind is str:
            frozen[key] = value
        elif key == "tools" and kind is list:
            schemas = []
            for schema in value:
                done = _frozen_schema(schema)
                if done is None:
                    return None
                schemas.append(done)
            frozen[key] = tuple(schemas)
        elif key == "adapter_defaults" and kind is list and all(type(v) is str for v in value):
            frozen[key] = tuple(value)
        else:
            return None
    return wrap_frozen({"header": wrap_frozen(frozen), "reason": reason})


def _frozen_schema(schema: Any) -> FrozenDict | None:
    """The frozen copy of a tool schema (an exact ``dict``), or ``None`` when it is not one or
    not lossless JSON. A kept copy is used only for the same dict whose JSON text is the same
    (types, key order, -0.0...) and which still equals the plain copy made then (which tells a
    NaN from the ``null`` it encodes to, and a non-JSON object from the text it encodes to):
    then the walk would build an equal copy, so an in-place change is never missed."""
    if type(schema) is not dict:
        return None
    try:
        text = orjson.dumps(schema)
    except TypeError:  # (orjson's JSONEncodeError): not JSON text; the walk names why
        return None
    kept = _SCHEMAS.get(id(schema))
    if kept is not None and kept[0] is schema and kept[1] == text and kept[2] == schema:
        return kept[3]
    frozen = freeze_plain_dict(schema)
    if frozen is None:
        return None
    if len(_SCHEMAS) >= _LIMIT:
        _SCHEMAS.clear()
    _SCHEMAS[id(schema)] = (schema, text, orjson.loads(text), frozen)
    return frozen
