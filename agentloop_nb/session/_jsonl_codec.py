"""Encoding and decoding of JSONL session lines, and the rules that decide what a file holds.

One rule is shared by the reader (``parse_log``) and the writer (``torn_tail_start``) so they
never disagree about which bytes are committed: the file's *final record* is the bytes after
the last newline when there are any (an unterminated write), else its last line. Only that
final record may be a torn write, and it is dropped (by the reader) or cut off (by the writer)
when it is unterminated or not JSON. Any bad line before it is corruption, reported as
``file:line``, never silently skipped.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .._event_names import ASSISTANT_CHUNK
from .._json import dumps_bytes
from ..errors import InvalidValueError
from ._events import (
    SURFACE_TYPES,
    SessionEvent,
    SessionHeader,
    make_chunk_event,
    make_event,
    normalize_surface_op,
)
from ._frozen import EMPTY, SHARED_WINDOW, FrozenDict, Shared, freeze_trusted
from ._nodes import LoadedEvents, parse_loaded_node
from ._persistence import SessionCorruptError

__all__ = [
    "decode_line",
    "encode_lines",
    "has_header",
    "parse_log",
    "torn_tail_start",
]

_intern = sys.intern
_TOO_DEEP = "the record is nested too deeply to read"


def _reject_constant(name: str) -> Any:
    raise InvalidValueError(f"{name} is not lossless JSON")


_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


def decode_line(text: str) -> Any:
    """Decode one JSON line. ``ValueError`` for anything that is not lossless JSON, including
    nesting deeper than the interpreter can recurse (never a bare ``RecursionError``)."""
    try:
        return _decode(text)
    except RecursionError:
        raise InvalidValueError(_TOO_DEEP) from None


_CHUNK_KEYS = ("turn", "step", "chunk")


def _event_from_line(obj: Any, seq: int, loaded: LoadedEvents, shared: Shared) -> SessionEvent:
    if type(obj) is not dict:
        raise InvalidValueError("not a JSON object")
    if obj.get("seq") != seq:
        raise InvalidValueError(f"expected seq {seq}, found {obj.get('seq')!r}")
    kind, when, data = obj.get("type"), obj.get("time"), obj.get("data")
    if type(kind) is not str or not kind:
        raise InvalidValueError("missing event type")
    kind = _intern(kind)  # one object per type, not one per line
    if type(when) is not float:
        if type(when) is not int:
            raise InvalidValueError("missing or invalid time")
        when = float(when)
    op = obj.get("surface_op")
    seqs = obj.get("source_event_seqs")
    simple = op is None and seqs is None and len(obj) <= 4
    if data is None:
        frozen: FrozenDict = EMPTY
    elif type(data) is dict:
        if simple and kind == ASSISTANT_CHUNK and tuple(data) == _CHUNK_KEYS:
            turn, step, chunk = data["turn"], data["step"], data["chunk"]
            if type(turn) is int and type(step) is int and type(chunk) is dict:
                # Every second event of a log: held without its outer mapping (ChunkEvent).
                return make_chunk_event(kind, seq, when, turn, step, freeze_trusted(chunk, shared))
        frozen = freeze_trusted(data, shared)  # decoded JSON: the walk's trusted entry
    else:
        raise InvalidValueError("data is not a JSON object")
    if simple:
        event = make_event(kind, seq, when, frozen)
    else:
        event = SessionEvent(kind, seq, when, frozen, normalize_surface_op(op, kind), seqs)
        if event.source_event_seqs:
            # The same int objects as the events' own seqs (checked: each names an earlier one)
            _set_seqs(event, tuple([loaded[s].seq for s in event.source_event_seqs]))
    if kind in SURFACE_TYPES:
        # A surface event that is not a message would load fine and then break every later
        # request: reject it here, where the file and line are known; the message is kept for
        # the session's derive_messages.
        loaded.nodes[seq] = (event, parse_loaded_node(kind, frozen, seq))
    return event


_set_seqs = SessionEvent.__dict__["source_event_seqs"].__set__


def _event_or_corrupt(
    path: Path, line: int, obj: Any, loaded: LoadedEvents, shared: Shared
) -> SessionEvent:
    try:
        return _event_from_line(obj, line - 2, loaded, shared)
    except RecursionError:
        raise SessionCorruptError(path, line, _TOO_DEEP) from None
    except (ValueError, TypeError) as exc:
        raise SessionCorruptError(path, line, str(exc)) from None


def parse_log(path: Path, id: str, raw: bytes) -> tuple[SessionHeader, list[SessionEvent]]:
    """The header and events of a session file's bytes. A torn final record is dropped; a bad
    line before it raises ``SessionCorruptError`` naming ``path`` and the line. The caller
    has already ruled out a file with no complete header line."""
    cut = raw.rfind(b"\n") + 1  # bytes after ``cut`` are a torn (unterminated) final record
    torn_tail = cut < len(raw)
    try:
        text = raw[:cut].decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        if torn_tail or line != raw.count(b"\n", 0, cut) or line == 1:
            raise SessionCorruptError(path, line, "invalid UTF-8") from None
        cut = raw.rfind(b"\n", 0, cut - 1) + 1  # the final line is the torn record
        text = raw[:cut].decode("utf-8")
        torn_tail = True
    lines = text.split("\n")
    lines.pop()  # the empty string after the final newline
    try:
        header = SessionHeader.from_dict(decode_line(lines[0]))
    except (ValueError, TypeError) as exc:
        raise SessionCorruptError(path, 1, f"bad header: {exc}") from None
    if header.id != id:
        raise SessionCorruptError(path, 1, f"the header names session {header.id!r}, not {id!r}")
    events = LoadedEvents()
    append = events.append
    # Only the final record may be torn: with unterminated bytes after it, every line is
    # committed; otherwise the last line may be.
    last_index = -1 if torn_tail else len(lines) - 1
    # Loading builds only acyclic objects; pausing the cyclic GC avoids repeated full
    # collections over a growing heap (several times the cost of parsing a large log).
    shared: Shared = {}  # what this log repeats nearby, one object each
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        for index in range(1, len(lines)):
            try:
                obj = decode_line(lines[index])
            except ValueError as exc:
                if index == last_index:
                    break  # an unparseable final line is a torn write, never committed
                raise SessionCorruptError(path, index + 1, str(exc)) from None
            append(_event_or_corrupt(path, index + 1, obj, events, shared))
            if len(shared) > SHARED_WINDOW:
                shared = {}  # bounded: see SHARED_WINDOW
    finally:
        if gc_enabled:
            gc.enable()
    return header, events


def has_header(f: BinaryIO) -> bool:
    """Whether the file starts with a complete (newline-terminated) header line. A file
    without one is what a crash during ``create`` leaves: it holds no session."""
    f.seek(0)
    while chunk := f.read(1 << 16):
        if b"\n" in chunk:
            return True
    return False


def _rfind_newline(f: BinaryIO, end: int) -> int:
    """Offset of the last ``\\n`` before ``end`` in binary file ``f`` (``-1``: none)."""
    chunk = 1 << 16
    while end > 0:
        start = max(0, end - chunk)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def _is_json_line(f: BinaryIO, start: int, end: int) -> bool:
    f.seek(start)
    try:
        decode_line(f.read(end - start).decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return False
    return True


def torn_tail_start(f: BinaryIO, size: int, path: Path) -> int:
    """Where the torn final record of the ``size``-byte file ``f`` starts (``size``: none).

    Same rule as ``parse_log``: unterminated bytes at the end are torn; with none, an
    unparseable last line is. ``SessionCorruptError`` when cutting the final record would
    leave garbage at the end (a bad line before it) or cut into the header.
    """
    f.seek(size - 1)
    if f.read(1) != b"\n":
        start = _rfind_newline(f, size) + 1
        if start > 0:
            previous = _rfind_newline(f, start - 1) + 1
            if previous > 0 and not _is_json_line(f, previous, start - 1):
                line = _line_number(f, previous)
                raise SessionCorruptError(path, line, "not JSON (before a torn final record)")
    else:
        start = _rfind_newline(f, size - 1) + 1
        if _is_json_line(f, start, size - 1):
            return size
    if start == 0:
        raise SessionCorruptError(path, 1, "the header line is incomplete")
    return start


def _line_number(f: BinaryIO, offset: int) -> int:
    f.seek(0)
    return f.read(offset).count(b"\n") + 1


_dumps = orjson.dumps


def encode_lines(events: Sequence[SessionEvent]) -> bytes:
    """One JSONL line per event (the bytes of ``to_json()``, in UTF-8). Anything orjson
    refuses (ints beyond 64 bits, lone surrogates) re-encodes the batch through ``dumps_bytes``,
    whose standard-library fallback decides those lines."""
    try:
        # fast path (benchmarks/bench_loop.py ingest): orjson itself, one call per event
        return b"".join([_dumps(event.to_dict()) + b"\n" for event in events])
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return b"".join([dumps_bytes(event.to_dict()) + b"\n" for event in events])
