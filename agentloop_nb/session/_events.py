"""``SessionEvent`` and ``SessionHeader``: the immutable records of the session log.

Both are frozen ``__slots__`` classes rather than pydantic models: one ``SessionEvent`` is built
per streamed chunk, so construction must cost a few hundred nanoseconds, and the expensive part
(checking and freezing ``data``) happens exactly once, in ``freeze_json``.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from .._event_names import SURFACE_TYPES
from .._json import dumps_str
from ..errors import InvalidTypeError, InvalidValueError
from ._frozen import EMPTY, FrozenDict, freeze_json, freeze_plain_dict, wrap_frozen

__all__ = [
    "HEADER_VERSION",
    "SURFACE_TYPES",
    "SessionEvent",
    "SessionHeader",
    "SurfaceOp",
]

HEADER_VERSION = 3
"""The header ``version`` this package writes. Version 3 leaves out a response's tail (its
last ``usage`` chunk and its ``finish``) when the ``assistant/message`` that follows implies
it: the message holds that usage, and the finish is ``tool-calls`` when it holds a tool call,
else ``stop`` (any other finish, a response with no other chunk to log, or one without a
message keeps its tail). Version 2 logs a model response's streamed chunks coalesced (a text
block's deltas joined, a tool-call block once, as the ``block-end`` carrying it); version 1
logged every chunk as streamed. Each ``assistant/chunk`` holds one ``chunk`` in all three, so
one reader serves them (:data:`READ_VERSIONS`), and an older log resumed by this package goes
on in the version-3 form under its old header."""

READ_VERSIONS = (1, 2, 3)
"""The header versions this package reads."""


SurfaceOp = str | FrozenDict
"""``"append"`` or a frozen ``{"op": "replace", "start": s, "end": e}``."""


def _frozen_setattr(self: object, name: str, value: object) -> NoReturn:
    raise AttributeError(f"{type(self).__name__} is immutable (cannot set {name!r})")


def _frozen_delattr(self: object, name: str) -> NoReturn:
    raise AttributeError(f"{type(self).__name__} is immutable (cannot delete {name!r})")


def _is_int(value: object) -> bool:
    return type(value) is int


def normalize_surface_op(op: object, event_type: str) -> SurfaceOp | None:
    """Validate a ``surface_op``: ``None``, ``"append"`` or ``{"op": "replace", "start": s,
    "end": e}`` with ``0 <= s <= e`` (inclusive surface indices). Raises ``ValueError``."""
    if op is None:
        return None
    if op == "append":
        return "append"
    if isinstance(op, Mapping) and op.get("op") == "replace":
        start, end = op.get("start"), op.get("end")
        if (
            set(op) == {"op", "start", "end"}
            and isinstance(start, int)
            and isinstance(end, int)
            and _is_int(start)
            and _is_int(end)
            and 0 <= start <= end
        ):
            if type(op) is FrozenDict:
                return op
            frozen: FrozenDict = freeze_json(dict(op), label=f"session event {event_type!r}")
            return frozen
    raise InvalidValueError(
        f"session event {event_type!r}: invalid surface_op {op!r}; expected None, 'append' or "
        "{'op': 'replace', 'start': s, 'end': e} with integers 0 <= s <= e"
    )


def normalize_source_seqs(seqs: object, seq: int, event_type: str) -> tuple[int, ...]:
    """Validate ``source_event_seqs``: integers naming earlier events (``0 <= s < seq``)."""
    if not seqs:
        return ()
    # Exact lists and tuples (every caller in the package) skip the two ABC checks below:
    # each runs a Python-level ``__instancecheck__``, and the loop logs source seqs every step.
    if type(seqs) is list or type(seqs) is tuple:
        out = tuple(seqs)
    elif isinstance(seqs, str | bytes | Mapping) or not isinstance(seqs, Iterable):
        raise InvalidValueError(
            f"session event {event_type!r}: source_event_seqs must be a list of event seqs, "
            f"got {seqs!r}"
        )
    else:
        out = tuple(seqs)
    for s in out:
        if type(s) is not int or not 0 <= s < seq:  # exact ints (a bool is no seq)
            raise InvalidValueError(
                f"session event {event_type!r} (seq {seq}): source_event_seqs entry {s!r} must "
                f"be the seq of an earlier event (an int in 0..{seq - 1})"
            )
    return out


def check_type(event_type: object) -> str:
    if type(event_type) is not str or not event_type:
        raise InvalidValueError(f"session event type must be a non-empty str, got {event_type!r}")
    return event_type


class SessionEvent:
    """One immutable entry of a session log.

    ``type``: event type (e.g. ``"tool/result"``); ``seq``: 0-based contiguous position;
    ``time``: epoch seconds; ``data``: deep-frozen JSON (``FrozenDict``, lists as tuples);
    ``surface_op``: ``None``, ``"append"`` or a frozen replace op; ``source_event_seqs``: seqs of
    the events this one was derived from. The public constructor checks every field
    (``TypeError`` for non-JSON data, ``ValueError`` for malformed fields); a session builds its
    events through a private fast path after the same checks. A loaded log's
    ``assistant/chunk`` events are ``ChunkEvent`` instances, a compact subclass whose ``data`` is
    built on access.
    """

    __slots__ = ("data", "seq", "source_event_seqs", "surface_op", "time", "type")

    type: str
    seq: int
    time: float
    data: FrozenDict
    surface_op: SurfaceOp | None
    source_event_seqs: tuple[int, ...]

    def __init__(
        self,
        type: str,
        seq: int,
        time: float | None = None,
        data: Mapping[str, Any] | None = None,
        surface_op: object = None,
        source_event_seqs: Iterable[int] | None = None,
    ) -> None:
        check_type(type)
        if not _is_int(seq) or seq < 0:
            raise InvalidValueError(f"session event {type!r}: seq must be an int >= 0, got {seq!r}")
        if time is None:
            time = _time.time()
        elif not isinstance(time, int | float) or isinstance(time, bool) or not math.isfinite(time):
            raise InvalidValueError(
                f"session event {type!r}: time must be epoch seconds, got {time!r}"
            )
        fields = (
            type,
            seq,
            float(time),
            freeze_data(type, data),
            normalize_surface_op(surface_op, type),
            normalize_source_seqs(source_event_seqs, seq, type),
        )
        for set_field, value in zip(_SET_EVENT, fields, strict=True):
            set_field(self, value)

    __setattr__ = _frozen_setattr
    __delattr__ = _frozen_delattr

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.type,
            self.seq,
            self.time,
            self.data,
            self.surface_op,
            self.source_event_seqs,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionEvent):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # data is a dict: events are not hashable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_event, self._fields())

    def __repr__(self) -> str:
        extra = ""
        if self.surface_op is not None:
            extra += f", surface_op={self.surface_op!r}"
        if self.source_event_seqs:
            extra += f", source_event_seqs={self.source_event_seqs!r}"
        return (
            f"SessionEvent(type={self.type!r}, seq={self.seq}, time={self.time!r}, "
            f"data={dict.__repr__(self.data)}{extra})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this event (``data`` stays frozen; ``json.dumps`` accepts it).
        ``surface_op`` and ``source_event_seqs`` are present only when set."""
        out: dict[str, Any] = {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            "data": self.data,
        }
        if self.surface_op is not None:
            out["surface_op"] = self.surface_op
        if self.source_event_seqs:
            out["source_event_seqs"] = list(self.source_event_seqs)
        return out

    def to_json(self) -> str:
        """Compact JSON (non-ASCII kept) of ``to_dict()``: the line the JSONL backend writes."""
        return dumps_str(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SessionEvent:
        """Rebuild an event from ``to_dict()`` output (checks every field)."""
        if not isinstance(obj, Mapping):
            raise InvalidValueError(
                f"a session event must be a JSON object, got {type(obj).__name__}"
            )
        unknown = set(obj) - {"type", "seq", "time", "data", "surface_op", "source_event_seqs"}
        if unknown or "type" not in obj or "seq" not in obj or "time" not in obj:
            raise InvalidValueError(
                "a session event needs 'type', 'seq' and 'time' (and optionally 'data', "
                f"'surface_op', 'source_event_seqs'); got keys {sorted(obj)}"
            )
        return cls(
            obj["type"],
            obj["seq"],
            obj["time"],
            obj.get("data"),
            obj.get("surface_op"),
            obj.get("source_event_seqs"),
        )


_SET_EVENT = tuple(
    SessionEvent.__dict__[name].__set__
    for name in ("type", "seq", "time", "data", "surface_op", "source_event_seqs")
)
_new_object = object.__new__


class _Event:
    """``SessionEvent``'s twin (``agentloop_nb._twin``): its six slots stored with plain stores,
    then the instance becomes the ``SessionEvent`` (benchmarks/README.md "Step (session
    14)": six setter calls cost about three times as much)."""

    __slots__ = ("data", "seq", "source_event_seqs", "surface_op", "time", "type")

    def __init__(
        self,
        type: str,
        seq: int,
        time: float,
        data: FrozenDict,
        surface_op: SurfaceOp | None = None,
        seqs: tuple[int, ...] = (),
    ) -> None:
        self.type = type
        self.seq = seq
        self.time = time
        self.data = data
        self.surface_op = surface_op
        self.source_event_seqs = seqs
        # A plain store (``_twin``): the twin has no ``__setattr__``, so this reaches the
        # ``__class__`` setter without ``object.__setattr__``'s wrapper call
        self.__class__ = SessionEvent  # type: ignore[assignment]


make_event: Callable[..., SessionEvent] = _Event  # type: ignore[assignment]
"""Private fast path: ``make_event(type, seq, time, data, surface_op=None, seqs=())``, an event
built from fields that were already checked and frozen (one per logged event: ``Session.append``
calls it, a loader too)."""


def _rebuild_event(*fields: Any) -> SessionEvent:
    return make_event(*fields)


_get_data = SessionEvent.__dict__["data"].__get__


class ChunkEvent(SessionEvent):
    """A loaded ``assistant/chunk`` event, held compactly: its ``data`` slot holds only the
    ``chunk`` and two more slots its ``turn`` and ``step``, so the ``{"turn", "step",
    "chunk"}`` mapping (184 bytes; every second event of a log is a chunk) is not kept.

    It is a ``SessionEvent`` in every way a reader sees (fields, equality, ``to_dict``,
    pickling, ``repr``), except that ``data`` is built on each access: equal each time, a
    fresh ``FrozenDict`` (``data["chunk"]`` is the same object each time). Built only by the
    loader (:func:`make_chunk_event`)."""

    __slots__ = ("_step", "_turn")

    _turn: int
    _step: int

    @property
    def data(self) -> FrozenDict:  # type: ignore[override]  # read-only: events are immutable
        return wrap_frozen({"turn": self._turn, "step": self._step, "chunk": _get_data(self)})

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SessionEvent:
        """A plain ``SessionEvent`` (see :meth:`SessionEvent.from_dict`)."""
        return SessionEvent.from_dict(obj)


_SET_TURN = ChunkEvent.__dict__["_turn"].__set__
_SET_STEP = ChunkEvent.__dict__["_step"].__set__

EVENT_TYPES = frozenset({SessionEvent, ChunkEvent})
"""The classes a session log holds (``type(event) in EVENT_TYPES``)."""


def make_chunk_event(
    type: str, seq: int, time: float, turn: int, step: int, chunk: FrozenDict
) -> ChunkEvent:
    """The loader's compact ``assistant/chunk`` event whose data is ``{"turn": turn, "step":
    step, "chunk": chunk}`` (in this key order), from checked, frozen fields."""
    event: ChunkEvent = _new_object(ChunkEvent)
    s_type, s_seq, s_time, s_data, s_op, s_seqs = _SET_EVENT
    s_type(event, type)
    s_seq(event, seq)
    s_time(event, time)
    s_data(event, chunk)
    s_op(event, None)
    s_seqs(event, ())
    _SET_TURN(event, turn)
    _SET_STEP(event, step)
    return event


def freeze_data(event_type: str, data: object) -> FrozenDict:
    """Check and deep-freeze an event's ``data`` (``None`` means ``{}``). ``TypeError`` names the
    event type and the JSON path of the first bad value."""
    if data is None:
        return EMPTY
    if type(data) is FrozenDict:
        return data
    if type(data) is dict:
        # fast path (benchmarks/bench_ab.py): most data is plain JSON, so no label built
        fast = freeze_plain_dict(data)
        if fast is not None:
            return fast
    elif not isinstance(data, dict):
        raise InvalidTypeError(
            f"session event {event_type!r}: data must be a dict of JSON values, "
            f"got {type(data).__qualname__}"
        )
    frozen: FrozenDict = freeze_json(data, label=f"session event {event_type!r}")
    return frozen


class SessionHeader:
    """The first record of a session: ``version``, ``id``, ``created_at`` (epoch s), ``cwd``
    and ``meta`` (deep-frozen JSON). Immutable."""

    __slots__ = ("created_at", "cwd", "id", "meta", "version")

    version: int
    id: str
    created_at: float
    cwd: str | None
    meta: FrozenDict

    def __init__(
        self,
        id: str,
        *,
        created_at: float | None = None,
        cwd: str | None = None,
        meta: Mapping[str, Any] | None = None,
        version: int = HEADER_VERSION,
    ) -> None:
        if type(id) is not str or not id:
            raise InvalidValueError(f"a session id must be a non-empty str, got {id!r}")
        if version not in READ_VERSIONS:
            raise InvalidValueError(
                f"session {id!r}: unsupported header version {version!r} (this agentloop_nb "
                f"reads versions {', '.join(map(str, READ_VERSIONS))}; a newer log needs a "
                "newer agentloop_nb)"
            )
        if cwd is not None and type(cwd) is not str:
            raise InvalidValueError(f"session {id!r}: cwd must be a str or None, got {cwd!r}")
        if created_at is None:
            created_at = _time.time()
        if not isinstance(created_at, int | float) or isinstance(created_at, bool):
            raise InvalidValueError(f"session {id!r}: created_at must be epoch seconds")
        if meta is None:
            frozen_meta = EMPTY
        elif isinstance(meta, dict):
            frozen_meta = freeze_json(meta, label=f"session {id!r} header", root="meta")
        else:
            raise InvalidTypeError(
                f"session {id!r}: meta must be a dict of JSON values, got {meta!r}"
            )
        osa = object.__setattr__
        osa(self, "version", version)
        osa(self, "id", id)
        osa(self, "created_at", float(created_at))
        osa(self, "cwd", cwd)
        osa(self, "meta", frozen_meta)

    __setattr__ = _frozen_setattr
    __delattr__ = _frozen_delattr

    def to_dict(self) -> dict[str, Any]:
        """The header line's JSON object (``"type": "session"`` marks it as a header)."""
        return {
            "type": "session",
            "version": self.version,
            "id": self.id,
            "created_at": self.created_at,
            "cwd": self.cwd,
            "meta": self.meta,
        }

    def to_json(self) -> str:
        return dumps_str(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SessionHeader:
        """Rebuild a header from ``to_dict()`` output (``ValueError`` when malformed)."""
        if not isinstance(obj, Mapping) or obj.get("type") != "session" or "id" not in obj:
            raise InvalidValueError(
                "not a session header (expected a JSON object with type 'session')"
            )
        return cls(
            obj["id"],
            created_at=obj.get("created_at"),
            cwd=obj.get("cwd"),
            meta=obj.get("meta"),
            version=obj.get("version", HEADER_VERSION),
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not SessionHeader:
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_header, (self.to_dict(),))

    def __repr__(self) -> str:
        return (
            f"SessionHeader(id={self.id!r}, version={self.version}, "
            f"created_at={self.created_at!r}, cwd={self.cwd!r}, meta={dict.__repr__(self.meta)})"
        )


def _rebuild_header(obj: dict[str, Any]) -> SessionHeader:
    return SessionHeader.from_dict(obj)
