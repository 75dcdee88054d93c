"""Deep-frozen, lossless JSON values for the session log.

One recursive walk both *checks* that a value is lossless JSON and *freezes* it: dicts become
``FrozenDict`` (a ``dict`` subclass whose mutators raise ``TypeError``) and lists become tuples.
It has two entries: ``freeze_json`` (checked: any value, errors named by their JSON path) and
``freeze_trusted`` (decoded JSON, which cannot be bad: no error translation).
Because ``FrozenDict`` is a real ``dict`` and tuples encode as JSON arrays, ``json.dumps`` works
on frozen data directly, and ``pydantic`` validates it like plain JSON.

Every ``FrozenDict`` in existence holds checked, frozen content (the public constructor runs the
walk; the walk builds them through a private path), so the walk returns an existing
``FrozenDict`` unchanged in O(1): re-logging data taken from another event (fork, repair, seed)
costs nothing.

Errors are ``TypeError`` (for every kind of non-JSON value, NaN/Infinity and cycles included), and
name the value's JSON path, e.g. ``data['meta']['x'] is a set``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, NoReturn

from ..errors import AgentloopError, InvalidTypeError

__all__ = [
    "EMPTY",
    "SHARED_WINDOW",
    "Fallback",
    "FrozenDict",
    "Shared",
    "freeze_fields",
    "freeze_json",
    "freeze_plain_dict",
    "freeze_trusted",
    "wrap_frozen",
]

_JSON_KINDS = "event data must be JSON (dict/list/str/int/finite float/bool/None)"


class FrozenDict(dict[str, Any]):
    """An immutable ``dict`` of checked JSON values (nested dicts frozen, lists as tuples).

    ``FrozenDict(mapping)`` checks and deep-freezes its argument (``TypeError`` for non-JSON
    content). Every mutating method raises ``TypeError``; ``dict(fd)`` / ``fd.copy()`` give a
    shallow, mutable plain ``dict``.
    """

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        frozen = freeze_json(dict(*args, **kwargs), label="FrozenDict", root="value")
        dict.__init__(self, frozen)

    def _immutable(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            "FrozenDict is immutable: session event data cannot be changed after append "
            "(copy it with dict(...) to build a modified value)"
        )

    __setitem__ = _immutable
    __delitem__ = _immutable
    __ior__ = _immutable
    clear = _immutable
    pop = _immutable
    popitem = _immutable
    setdefault = _immutable
    update = _immutable

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # The default dict-subclass pickling refills through ``__setitem__``, which raises.
        return (_rebuild, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """As a notebook cell's output: the plain mapping (IPython's pretty printer), which
        is what a reader wants to see, not the wrapper."""
        printer.pretty(dict(self))


_new_dict = dict.__new__
_init_dict = dict.__init__


def wrap_frozen(items: dict[str, Any]) -> FrozenDict:
    """A ``FrozenDict`` of ``items`` whose values are already frozen, without re-checking them
    (what the walk builds its results with; the loop wraps its own event data with it)."""
    fd: FrozenDict = _new_dict(FrozenDict)
    _init_dict(fd, items)
    return fd


def _rebuild(items: dict[str, Any]) -> FrozenDict:
    return wrap_frozen(items)


EMPTY: FrozenDict = wrap_frozen({})
"""The shared empty ``FrozenDict`` (``data`` of an event appended with ``data=None``)."""


class _Bad(AgentloopError):
    """Internal: a non-JSON value; ``path`` is built innermost-first while unwinding."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.path: list[str | int] = []
        self.here = False


def _describe(value: object) -> str:
    if isinstance(value, float):
        return f"{value!r} (not a finite number)"
    if isinstance(value, set | frozenset):
        return "a set" if isinstance(value, set) else "a frozenset"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    kind = type(value)
    hint = ""
    if hasattr(kind, "model_dump"):
        hint = " (dump pydantic models first: model.model_dump(mode='json'))"
    name = kind.__qualname__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} object{hint}"


def _bad_key(key: object) -> _Bad:
    bad = _Bad(f"has a non-string key {key!r} ({type(key).__qualname__})")
    bad.here = True  # the problem is the dict at the current path, not one of its values
    return bad


def _other(value: Any, active: set[int] | None) -> Any:
    """What the walk's inline tests leave: a non-finite float, subclasses of the JSON types
    (``OrderedDict``, ``StrEnum``...), and everything that is not JSON (``_Bad``)."""
    if isinstance(value, dict):  # OrderedDict, defaultdict...: frozen like a plain dict
        return _walk_dict(value, active)
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return _walk_list(value, active)  # list/tuple subclasses, but not namedtuples
    # Subclasses of str/int/float (enums...) become the exact JSON type.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        f = float.__float__(value)
        if math.isfinite(f):
            return f
    raise _Bad(f"is {_describe(value)}")


_CYCLE = "is a cycle (a container that contains itself)"

# The walk: one recursive pass that checks a value is lossless JSON and freezes it.
# fast path (benchmarks/bench_ab.py): exact JSON types are tested inline (most data is nothing
# else); the rest goes to ``_other``. ``active``
# is ``None`` on the first pass, which keeps no cycle bookkeeping: a cycle recurses until
# ``RecursionError``, and only then does the entry walk again with ``active`` (the ids of the
# containers on the current path) to tell a cycle, named by its path, from deep nesting. A
# ``_Bad`` collects its JSON path while it unwinds (``try`` costs nothing until it raises).


def _walk_dict(value: dict[Any, Any], active: set[int] | None) -> FrozenDict:
    if active is not None:
        if id(value) in active:
            raise _Bad(_CYCLE)
        active.add(id(value))
    out: dict[str, Any] = {}
    key: Any = None
    try:
        for key, item in value.items():
            if type(key) is not str:
                if not isinstance(key, str):
                    raise _bad_key(key)
                # str subclasses (StrEnum...) encode as their plain value: keep that, not the type
                key = str.__str__(key)
            t = type(item)
            if t is str or t is int or t is bool or item is None or t is FrozenDict:
                out[key] = item
            elif t is dict:
                out[key] = _walk_dict(item, active)
            elif t is list or t is tuple:
                out[key] = _walk_list(item, active)
            elif t is float and item - item == 0.0:  # False for NaN and ±Infinity
                out[key] = item
            else:
                out[key] = _other(item, active)
    except _Bad as bad:
        if bad.here:
            bad.here = False
        else:
            bad.path.append(key)
        raise
    if active is not None:
        active.discard(id(value))
    return wrap_frozen(out)


def _walk_list(value: list[Any] | tuple[Any, ...], active: set[int] | None) -> tuple[Any, ...]:
    if active is not None:
        if id(value) in active:
            raise _Bad(_CYCLE)
        active.add(id(value))
    out: list[Any] = []
    append = out.append
    try:
        for item in value:
            t = type(item)
            if t is str or t is int or t is bool or item is None or t is FrozenDict:
                append(item)
            elif t is dict:
                append(_walk_dict(item, active))
            elif t is list or t is tuple:
                append(_walk_list(item, active))
            elif t is float and item - item == 0.0:
                append(item)
            else:
                append(_other(item, active))
    except _Bad as bad:
        bad.path.append(len(out))  # the index of the item that failed
        raise
    if active is not None:
        active.discard(id(value))
    return tuple(out)


def _walk(value: Any, active: set[int] | None) -> Any:
    t = type(value)
    if t is dict:
        return _walk_dict(value, active)
    if t is str or t is int or t is bool or value is None or t is FrozenDict:
        return value
    if t is list or t is tuple:
        return _walk_list(value, active)
    if t is float and value - value == 0.0:
        return value
    return _other(value, active)


def _format_path(root: str, path: list[str | int]) -> str:
    return root + "".join(f"[{p!r}]" for p in reversed(path))


class Fallback(AgentloopError):
    """Raised by :func:`freeze_fields` for a value only the slow path may decide (serialising
    the record, then the checked walk); its callers catch it and take that path."""


_FALLBACK = Fallback()


def freeze_fields(fields: dict[str, Any]) -> FrozenDict:
    """The frozen copy of a flat record's fields (e.g. a model's ``__dict__``) without its
    ``None`` values. Every other value must be an exact ``str``/``int``/``bool`` or a finite
    ``float``; anything else raises :class:`Fallback` (serialise the record instead)."""
    out: dict[str, Any] = {}
    for key, item in fields.items():
        t = type(item)
        if t is str or t is int or t is bool or (t is float and item - item == 0.0):
            out[key] = item
        elif item is not None:
            raise _FALLBACK
    # fast path (benchmarks/README.md "Issue 28: a tool step's own work"): ``wrap_frozen``
    # inlined, no frame (once per streamed chunk)
    fd: FrozenDict = _new_dict(FrozenDict)
    _init_dict(fd, out)
    return fd


def freeze_plain_dict(value: dict[Any, Any]) -> FrozenDict | None:
    """:func:`freeze_json` of an exact ``dict`` without an error label to build: its frozen
    copy, or ``None`` when it is not lossless JSON or nests too deeply (then
    :func:`freeze_json` names the problem)."""
    try:
        return _walk_dict(value, None)
    except (_Bad, RecursionError):
        return None


def freeze_json(value: Any, *, label: str, root: str = "data") -> Any:
    """The checked entry: check that ``value`` is lossless JSON and return a deep-frozen copy.

    ``label`` prefixes the error (e.g. ``"session event 'tool/result'"``) and ``root`` names the
    value in the JSON path. Raises ``TypeError`` naming the path of the first bad value: NaN or
    ±Infinity, a non-``str`` key, a cycle, a set, bytes or any other object (pydantic models
    included: callers dump them first). Subclasses of ``str``/``int``/``float`` (enums) are
    normalised to the plain type.
    """
    try:
        return _walk(value, None)
    except _Bad as bad:
        error = bad
    except RecursionError:
        # A cycle, or nesting deeper than the interpreter recurses: walk again keeping the
        # containers on the path, to name the cycle by its path (error path only).
        try:
            return _walk(value, set())
        except _Bad as bad:
            error = bad
        except RecursionError:
            raise InvalidTypeError(f"{label}: {root} is nested too deeply; {_JSON_KINDS}") from None
    where = _format_path(root, error.path)
    raise InvalidTypeError(f"{label}: {where} {error.what}; {_JSON_KINDS}") from None


Shared = dict[Any, Any]
"""What one load shares (:func:`freeze_trusted`): a string longer than :data:`SHARED_STR` →
its one copy, a small dict's items → its one ``FrozenDict``, and ``id(frozen)`` → ``frozen``
for each of those (what tells a shared value from a fresh one). A loader may clear it
between records (:data:`SHARED_WINDOW`): what came before is then shared no more."""

SHARED_WINDOW = 1 << 14
"""Entries of a loader's ``Shared`` map after which it starts a new one: sharing is for what
a log repeats nearby (a streamed text in its message, a tool call's arguments in its chunk,
message and ``tool/call``; the same small dicts step after step), and the map, which lives
only while a log loads, stays bounded."""


def freeze_trusted(value: Any, shared: Shared | None = None) -> Any:
    """The trusted entry: the frozen copy of a value known to be lossless JSON (decoded by a
    JSON parser that refuses NaN), so no error is translated; nesting deeper than the
    interpreter recurses raises ``RecursionError``.

    What a loaded log holds, shared instead of copied: every key and every string of at most
    :data:`SHARED_STR` characters is interned (a JSON decoder builds fresh strings per
    document, so a log repeats ``"type"``, ``"turn"``, ``"text-delta"``... once per line), and
    with ``shared`` (see :data:`Shared`) equal longer strings are one object, and every small
    dict of strings, ints and dicts shared the same way (``{"type": "block-end", "index": 0}``,
    ``{"kind": "stop"}``, ``{"type": "finish", "reason": {"kind": "stop"}}``, a tool call's
    block in its chunk and its message) is one ``FrozenDict`` however often it occurs (frozen
    values and strings can be shared safely)."""
    t = type(value)
    if t is dict:
        return _load_dict(value, {} if shared is None else shared)
    if t is list:
        return _load_list(value, {} if shared is None else shared)
    return _walk(value, None)


SHARED_STR = 16
"""Strings of a loaded log up to this length are interned (keys always are)."""
_SHARED_ITEMS = 4  # dicts of at most this many plain items are shared
_intern = sys.intern
_NESTED = object()  # tags a shared dict value in a share key: (key, id(value), _NESTED)


def _load_dict(value: dict[str, Any], shared: Shared) -> FrozenDict:
    out: dict[str, Any] = {}
    plain = len(value) <= _SHARED_ITEMS  # only str/int values and shared dicts so far (bool,
    # float: never, since ``1 == True == 1.0`` would make their dicts equal keys)
    nested = False  # holds a shared dict (keyed by its identity)
    for key, item in value.items():
        t = type(item)
        if t is str:
            item = _intern(item) if len(item) <= SHARED_STR else shared.setdefault(item, item)
        elif t is int:
            pass
        elif t is dict:
            item = _load_dict(item, shared)
            if plain:
                if id(item) in shared:
                    nested = True
                else:
                    plain = False
        else:
            plain = False
            if t is list:
                item = _load_list(item, shared)
        out[_intern(key)] = item
    if plain:
        if nested:
            items: tuple[Any, ...] = tuple(
                [(k, id(v), _NESTED) if type(v) is FrozenDict else (k, v) for k, v in out.items()]
            )
        else:
            items = tuple(out.items())
        frozen = shared.get(items)
        if frozen is None:
            frozen = shared[items] = wrap_frozen(out)
            shared[id(frozen)] = frozen
        return frozen
    return wrap_frozen(out)


def _load_list(value: list[Any], shared: Shared) -> tuple[Any, ...]:
    out: list[Any] = []
    append = out.append
    for item in value:
        t = type(item)
        if t is str:
            item = _intern(item) if len(item) <= SHARED_STR else shared.setdefault(item, item)
        elif t is dict:
            item = _load_dict(item, shared)
        elif t is list:
            item = _load_list(item, shared)
        append(item)
    return tuple(out)
