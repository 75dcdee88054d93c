"""File-level helpers of the JSONL writer: whole writes that never leave half a line, the
fingerprint a writer keeps of its file, and the ``PersistenceError`` messages (file, OS
error, what to do)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from ._persistence import PersistenceError

__all__ = ["Stamp", "changed_error", "persistence_error", "stamp", "write_all"]

Stamp = tuple[int, int, int]  # (inode, size, mtime_ns): what this writer last saw of a file


def stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


_HINTS = {
    errno.ENOSPC: "the disk is full: free some space",
    errno.EDQUOT: "the disk quota is exhausted: free some space",
    errno.EFBIG: "the file reached the size limit: raise the limit or free space",
    errno.ENOENT: "the session file or its directory was deleted or moved while in use",
    errno.EACCES: "the directory is not writable: fix its permissions or choose another "
    "persistence_root",
    errno.EPERM: "the directory is not writable: fix its permissions or choose another "
    "persistence_root",
    errno.EROFS: "the file system is read-only: choose another persistence_root",
}


def persistence_error(
    id: str, path: Path, exc: BaseException, what: str, durable_seq: int | None = None
) -> PersistenceError:
    """The ``PersistenceError`` for ``exc``: the file, the OS error, and what to do."""
    if isinstance(exc, PersistenceError):
        return exc
    errno_ = exc.errno if isinstance(exc, OSError) else None
    hint = _HINTS.get(errno_ or -1, "check the disk and the directory")
    message = f"cannot {what} session {id!r} at {path.resolve()}: {exc} ({hint})"
    if durable_seq is not None:
        message += (
            f"; the file holds events up to seq {durable_seq} and nothing in it was changed, "
            "later events exist only in memory. Fix the cause, then dispose the agent and "
            "resume the session"
        )
    error = PersistenceError(message, id=id, path=path.resolve())
    error.__cause__ = exc
    return error


def changed_error(id: str, path: Path, known: Stamp, st: os.stat_result) -> PersistenceError:
    what = "replaced" if st.st_ino != known[0] else f"{st.st_size - known[1]:+d} bytes"
    return PersistenceError(
        f"cannot write session {id!r}: {path.resolve()} is not what this writer last wrote "
        f"({what}): another writer or program changed it. Nothing more is written to it; "
        "stop the other writer, then dispose the agent and resume the session",
        id=id,
        path=path.resolve(),
    )


def write_all(fd: int, blob: bytes, size: int) -> None:
    """Write ``blob`` at the end of the ``size``-byte file ``fd``; on failure cut the file back
    to ``size`` so no partial line remains (committed bytes are never touched)."""
    try:
        written = os.write(fd, blob)  # one call writes it all but on a short write
        if written < len(blob):
            view = memoryview(blob)[written:]
            while view:
                view = view[os.write(fd, view) :]
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise
