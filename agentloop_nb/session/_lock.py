"""One writer per session: an exclusive ``flock`` on ``<root>/<id>.jsonl.lock``.

The lock belongs to an open file description, so it excludes another process *and* another
backend instance in the same process, and the OS drops it when the holder dies (a killed
process never bricks a session). The file holds the holder's pid and host for the error
message. It is removed on release, while still locked; a writer that locked a file which is no
longer the one at the path retries, so two writers never hold locks on different inodes. A file
left by a killed holder is unlocked and simply reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from .._json import dumps_bytes
from ._persistence import SessionLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, one writer is on trust
    fcntl = None  # type: ignore[assignment]

__all__ = ["Held", "LockTable"]


class Held:
    """A lock this backend holds. ``owner`` is the attached session (``None`` while reserved
    by ``acquire`` for a resume in progress)."""

    __slots__ = ("fd", "id", "owner", "path")

    def __init__(self, id: str, path: Path, fd: int) -> None:
        self.id = id
        self.path = path
        self.fd = fd
        self.owner: Any = None


def _holder_of(fd: int) -> dict[str, object]:
    try:
        value = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _lock_file(id: str, path: Path) -> int:
    """An open descriptor of ``path`` holding the exclusive lock, or ``SessionLockedError``."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                current = False
        except BlockingIOError:
            holder = _holder_of(fd)
            os.close(fd)
            raise SessionLockedError(id, path.resolve(), holder) from None
        except BaseException:
            os.close(fd)
            raise
        if current:
            return fd
        # The previous holder unlinked this file as we opened it: lock the new one instead.
        os.close(fd)


def _take(id: str, path: Path) -> Held:
    fd = _lock_file(id, path)
    note = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    with contextlib.suppress(OSError):  # the holder note is a courtesy, the lock is the flock
        os.ftruncate(fd, 0)
        os.pwrite(fd, dumps_bytes(note), 0)
    return Held(id, path, fd)


def _drop(held: Held) -> None:
    # Unlink while still holding the lock: a writer that opened the old file then finds it is
    # no longer the one at ``path`` and retries (see ``_lock_file``).
    with contextlib.suppress(OSError):
        os.unlink(held.path)
    with contextlib.suppress(OSError):
        os.close(held.fd)  # releases the flock


class LockTable:
    """The locks one backend holds, by session id. Thread-safe: the event loop takes locks,
    the writer thread releases them after the session's last write."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self._held: dict[str, Held] = {}
        _tables.add(self)

    def get(self, id: str) -> Held | None:
        return self._held.get(id)

    def take(self, id: str, path: Path) -> Held:
        """Lock ``path`` for ``id``. ``SessionLockedError`` when another writer holds it;
        ``OSError`` when the lock file cannot be opened."""
        with self.mutex:
            held = _take(id, path)
            self._held[id] = held
            return held

    def release(self, held: Held) -> None:
        """Give ``held`` back (no-op when it is no longer in the table)."""
        with self.mutex:
            if self._held.get(held.id) is not held:
                return
            del self._held[held.id]
        _drop(held)

    def release_all(self) -> None:
        with self.mutex:
            held, self._held = [*self._held.values()], {}
        for item in held:
            _drop(item)

    def forget(self) -> None:
        """In a forked child: close the inherited descriptors without touching the files. The
        lock stays the parent's alone, so it still ends when the parent dies."""
        held, self._held = [*self._held.values()], {}
        self.mutex = threading.RLock()  # another thread may have held it at the fork
        for item in held:
            with contextlib.suppress(OSError):
                os.close(item.fd)


_tables: weakref.WeakSet[LockTable] = weakref.WeakSet()


def _forget_in_child() -> None:
    for table in [*_tables]:
        table.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def release_all(table: LockTable) -> None:
    """Finalizer target: a backend that is garbage-collected gives its locks back."""
    table.release_all()
