"""Listing stored sessions from their headers alone.

A listing never reads or parses a session's events: the JSONL backend reads each file's first
line (at most :data:`MAX_HEADER_BYTES`, in one or a few 4 KiB reads), the PostgreSQL backend
only its header table. A session whose header cannot be read is *listed*, as unreadable with
the reason, never dropped: one bad file must not hide the others, nor itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from .._record import Record, set_field
from ..errors import InvalidValueError
from ._events import SessionHeader
from ._jsonl_codec import decode_line

__all__ = [
    "MAX_HEADER_BYTES",
    "StoredSession",
    "headers_of",
    "list_sessions",
    "parse_header",
    "scan_directory",
]

_log = logging.getLogger("agentloop_nb")

#: The longest header line a listing reads; a longer first line is reported, not read on.
MAX_HEADER_BYTES: Final = 1 << 20
_CHUNK = 4096


class StoredSession(Record):
    """One stored session as a listing sees it: its ``id`` and ``where`` it is stored (a file,
    a table row), and either its ``header`` or, when that cannot be read, ``problem`` saying
    why (``header`` is then ``None``)."""

    __slots__ = ("header", "id", "problem", "where")
    __match_args__ = ("id", "where", "header", "problem")

    id: str
    where: str
    header: SessionHeader | None
    problem: str | None

    def __init__(
        self,
        id: str,
        where: str,
        header: SessionHeader | None = None,
        problem: str | None = None,
    ) -> None:
        set_field(self, "id", id)
        set_field(self, "where", where)
        set_field(self, "header", header)
        set_field(self, "problem", problem)

    @property
    def readable(self) -> bool:
        return self.header is not None


def parse_header(id: str, where: str, line: bytes | str) -> StoredSession:
    """The listing entry of session ``id`` whose header record is ``line``: readable, or
    unreadable naming what is wrong (never raises for a bad record)."""
    try:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
        header = SessionHeader.from_dict(decode_line(text))
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        return StoredSession(id, where, problem=f"bad header: {exc}")
    if header.id != id:
        return StoredSession(
            id, where, problem=f"the header names session {header.id!r}, not {id!r}"
        )
    return StoredSession(id, where, header)


def ordered(entries: Iterable[StoredSession]) -> list[StoredSession]:
    """Readable sessions oldest first (then by id), the unreadable ones after them by id."""
    entries = list(entries)
    readable = [e for e in entries if e.header is not None]
    readable.sort(key=lambda e: (e.header.created_at, e.id))  # type: ignore[union-attr]
    broken = sorted((e for e in entries if e.header is None), key=lambda e: e.id)
    return readable + broken


def headers_of(entries: Iterable[StoredSession]) -> list[SessionHeader]:
    """The readable headers of a listing, in its order; each unreadable entry is logged (a
    warning naming where it is and why), not returned."""
    headers: list[SessionHeader] = []
    for entry in entries:
        if entry.header is not None:
            headers.append(entry.header)
        else:
            _log.warning("%s: skipped, unreadable session header (%s)", entry.where, entry.problem)
    return headers


def _first_line(path: Path) -> bytes | None:
    """The first line of ``path`` with its newline; ``None`` when there is no complete first
    line (a crash during ``create``: no session). Reads at most ``MAX_HEADER_BYTES`` plus one
    chunk; ``ValueError`` when the first line is longer than that."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray()
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return None
            end = chunk.find(b"\n")
            if end >= 0:
                buf += chunk[: end + 1]
                break
            buf += chunk
            if len(buf) > MAX_HEADER_BYTES:
                raise InvalidValueError(
                    f"the first line is longer than {MAX_HEADER_BYTES} bytes: not a session "
                    "header (a file written by something else?)"
                )
    finally:
        os.close(fd)
    if len(buf) > MAX_HEADER_BYTES:
        raise InvalidValueError(f"the header line is longer than {MAX_HEADER_BYTES} bytes")
    return bytes(buf)


def scan_directory(root: Path) -> list[StoredSession]:
    """Every ``<id>.jsonl`` session under ``root`` from its first line only (see the module
    docstring), in :func:`ordered` order. A file with no complete first line holds no session
    and is left out (what a crash during ``create`` leaves behind)."""
    if not root.is_dir():
        return []
    entries: list[StoredSession] = []
    for path in root.glob("*.jsonl"):
        id = path.name[: -len(".jsonl")]
        where = str(path)
        try:
            line = _first_line(path)
        except (OSError, ValueError) as exc:
            entries.append(StoredSession(id, where, problem=_reason(exc)))
            continue
        if line is not None:
            entries.append(parse_header(id, where, line))
    return ordered(entries)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read the file: {exc.strerror}"
    return str(exc) or type(exc).__name__


def list_sessions(persistence: Any) -> list[StoredSession]:
    """The listing of any backend: its ``scan()`` when it has one (both built-in backends
    do), else its ``list()`` headers as readable entries."""
    scan = getattr(persistence, "scan", None)
    if scan is not None:
        return list(scan())
    return [StoredSession(h.id, h.id, h) for h in persistence.list()]
