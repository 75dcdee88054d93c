"""The package's one JSON encoder for the session log, the wire and providers: orjson first,
the standard library only for what orjson refuses.

Both write compact JSON (no spaces) with non-ASCII text as UTF-8, and they agree byte for byte
wherever both accept a value (a test checks), so a session line does not depend on which one
wrote it. orjson refuses integers beyond 64 bits, lone surrogates and non-``str`` keys; the
standard library writes the first two (a lone surrogate has no UTF-8 form: ``dumps_bytes``
then ``\\u``-escapes the whole value, still lossless JSON) and turns ``int``/``float``/``bool``/
``None`` keys into strings. What neither accepts raises ``TypeError`` (``ValueError`` for NaN
or ±Infinity in a value orjson refused for another reason; orjson itself writes them as
``null``: callers that must refuse them check first, as the session log does).

Places that want another form keep ``json.dumps`` with their options and a one-line reason
(sorted keys for a stable hash, indentation or ASCII for people); tool-call argument text is
:func:`dumps_arguments`.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps_arguments", "dumps_bytes", "dumps_str"]

_orjson_dumps = orjson.dumps
_stdlib = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_stdlib_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode


def dumps_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON bytes."""
    try:
        return _orjson_dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    text = _stdlib(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _stdlib_ascii(value).encode("ascii")


def dumps_str(value: Any) -> str:
    """``value`` as compact JSON text (non-ASCII kept; a lone surrogate kept as is)."""
    try:
        return _orjson_dumps(value).decode("utf-8")
    except TypeError:
        return _stdlib(value)


def dumps_arguments(value: Any) -> str:
    """The text of a tool call's arguments made from an object (a scripted or offline model, a
    server that sends the object itself, an approver's edit). The standard library's default
    (spaced, ASCII) form, as these places always wrote it: model-facing text that transcripts
    show and tests pin, not a log or wire encoding."""
    return json.dumps(value)
