"""The persistence seam (``ctx.session_persistence``) and its errors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from ._events import SessionEvent, SessionHeader

__all__ = [
    "Persistence",
    "PersistenceError",
    "SessionCorruptError",
    "SessionNotFoundError",
]


@runtime_checkable
class Persistence(Protocol):
    """A session storage backend. The four methods are synchronous primitives (a write-behind
    backend calls ``create``/``append`` from its own writer, off the event loop).

    - ``create(header)``: start a new stored session; raises if one already exists.
    - ``append(id, events)``: append events (contiguous, after what is stored); committed
      records are never rewritten.
    - ``load(id) -> (header, events)``: raises ``SessionNotFoundError`` / ``SessionCorruptError``.
    - ``list() -> headers``: every stored session's header.
    """

    def create(self, header: SessionHeader) -> None: ...

    def append(self, id: str, events: Sequence[SessionEvent]) -> None: ...

    def load(self, id: str) -> tuple[SessionHeader, list[SessionEvent]]: ...

    def list(self) -> list[SessionHeader]: ...


class SessionNotFoundError(LookupError):
    """No stored session has this id (the message says where the backend looked)."""

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id


class SessionCorruptError(ValueError):
    """A committed record cannot be read: ``path`` and 1-based ``line`` locate it."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(
            f"{path}:{line}: corrupt session record ({reason}); the lines before it are intact "
            "— move the file aside or truncate it before this line to recover them"
        )
        self.path = path
        self.line = line
        self.reason = reason


class PersistenceError(RuntimeError):
    """Writing a session failed; raised by ``flush`` (and every later flush of that session)."""

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id
