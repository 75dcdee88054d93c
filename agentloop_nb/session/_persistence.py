"""The persistence seam (``ctx.session_persistence``) and its errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from .._disposer import Disposer
from .._hook_names import SESSION_CREATED, SESSION_DISPOSED, SESSION_FLUSH
from ..errors import AgentloopError
from ._events import SessionEvent, SessionHeader

__all__ = [
    "HeldLease",
    "HeldLock",
    "Lease",
    "Persistence",
    "PersistenceError",
    "SessionCorruptError",
    "SessionExistsError",
    "SessionLockedError",
    "SessionNotFoundError",
    "Subscriber",
    "install_write_behind",
    "reserve",
]


class Lease(Protocol):
    """A writer reservation taken before loading a session to resume it (see
    ``JsonlPersistence.acquire``). ``release()`` gives it back when the resume fails before the
    session is published; it is idempotent and does nothing once the session is attached (the
    session's disposal releases the lock then)."""

    def release(self) -> None: ...


class HeldLock(Protocol):
    """A backend's record of a writer lock it holds: ``owner`` is the attached session
    (``None`` while the lock is only reserved)."""

    owner: Any


H = TypeVar("H", bound=HeldLock)


class HeldLease(Generic[H]):
    """The :class:`Lease` both backends hand out: ``release()`` gives the reserved lock back
    through ``unlock`` once, unless a session has adopted it by then (its disposal releases
    it). ``unlock`` is a method of the backend: the lease keeps the backend alive through it,
    so a lease taken from a backend nobody else references still holds the lock."""

    __slots__ = ("_held", "_unlock")

    def __init__(self, held: H | None, unlock: Callable[[H], Any]) -> None:
        self._held = held
        self._unlock = unlock

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None and held.owner is None:
            self._unlock(held)


def reserve(held: H | None, take: Callable[[], H], unlock: Callable[[H], Any]) -> HeldLease[H]:
    """The writer-lock reservation rule of ``acquire``, given the lock this backend holds for
    the id (or ``None``; call under the backend's mutex): none held → ``take()`` a new one;
    held by a live (or reserved) session → an empty lease (the session store reports that
    conflict); held by a detached session → the lease takes it over, so that session's
    pending close does not release it."""
    if held is None:
        return HeldLease(take(), unlock)
    owner = held.owner
    if owner is None or owner.state != "detached":
        return HeldLease(None, unlock)
    held.owner = None
    return HeldLease(held, unlock)


@runtime_checkable
class Persistence(Protocol):
    """A session storage backend. The four methods are synchronous primitives (a write-behind
    backend calls ``create``/``append`` from its own writer, off the event loop).

    - ``create(header)``: start a new stored session; raises if one already exists.
    - ``append(id, events)``: append events (contiguous, after what is stored); committed
      records are never rewritten.
    - ``load(id) -> (header, events)``: raises ``SessionNotFoundError`` / ``SessionCorruptError``.
    - ``list() -> headers``: every stored session's header.

    A backend that enforces one writer per session also offers ``acquire(id) -> Lease``
    (raises ``SessionLockedError``), called before ``load`` when resuming.
    """

    def create(self, header: SessionHeader) -> None: ...

    def append(self, id: str, events: Sequence[SessionEvent]) -> None: ...

    def load(self, id: str) -> tuple[SessionHeader, list[SessionEvent]]: ...

    def list(self) -> list[SessionHeader]: ...


class SessionNotFoundError(LookupError, AgentloopError):
    """No stored session has this id (the message says where the backend looked)."""

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id


class SessionExistsError(FileExistsError, AgentloopError):
    """A new session's id is already stored (the message says where); resume it instead or
    choose another id."""


class SessionCorruptError(ValueError, AgentloopError):
    """A committed record cannot be read: ``path`` and 1-based ``line`` locate it."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(
            f"{path}:{line}: corrupt session record ({reason}); the lines before it are intact "
            "— move the file aside or truncate it before this line to recover them"
        )
        self.path = path
        self.line = line
        self.reason = reason


class PersistenceError(RuntimeError, AgentloopError):
    """Writing a session failed; raised by ``flush`` (and every later flush of that session).

    ``code`` is always ``"PERSISTENCE"``; ``path`` is the file concerned (``None`` when
    unknown). The message names the file, the OS error and what to do about it.
    """

    code = "PERSISTENCE"

    def __init__(self, message: str, *, id: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.id = id
        self.path = path


class SessionLockedError(RuntimeError, AgentloopError):
    """Another writer (another App, notebook or process) has this session attached.

    ``holder`` is what the holder wrote into the lock file (``pid``, ``host``; empty when
    unreadable); ``path`` is the lock file.
    """

    def __init__(self, id: str, path: Path, holder: dict[str, object]) -> None:
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        super().__init__(
            f"session {id!r} is attached to another writer (pid {pid} on host {host}, lock "
            f"{path}); only one agent may write a session at a time: dispose the other agent, "
            "close the other notebook or stop that process, then resume again"
        )
        self.id = id
        self.path = path
        self.holder = holder


class Subscriber(Protocol):
    """What a backend subscribes through: anything with ``on(name, handler)`` returning a
    callable that unsubscribes (a context)."""

    def on(self, name: str, handler: Callable[[Any], Any], /) -> Any: ...


def install_write_behind(
    ctx: Subscriber,
    *,
    created: Callable[[Any], Any],
    flush: Callable[[Any], Any],
    disposed: Callable[[Any], Any],
) -> Disposer:
    """Subscribe a write-behind backend's three session listeners on ``ctx``
    (``session/created``, ``session/flush``, ``session/disposed``); the returned ``Disposer``
    unsubscribes them in reverse order (queued writes still complete). The backend learns of
    each logged event from the session itself (``Session.watch_appends``), not from
    ``session/event``."""
    disposers = [
        ctx.on(SESSION_CREATED, created),
        ctx.on(SESSION_FLUSH, flush),
        ctx.on(SESSION_DISPOSED, disposed),
    ]

    def undo() -> None:
        for dispose in reversed(disposers):
            dispose()

    return Disposer(undo)
