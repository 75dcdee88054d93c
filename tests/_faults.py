"""Disk faults for the persistence tests: make ``os.write`` fail for one file only."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def failing_disk(
    monkeypatch: pytest.MonkeyPatch, path: Path, code: int = errno.ENOSPC, *, short: bool = True
) -> Callable[[], None]:
    """From now on, writes to ``path`` fail with ``code`` (``ENOSPC``: a full disk, ``EROFS``: a
    read-only one); with ``short`` a large write first goes half through (a short write, as
    a disk filling up mid-write does). Other files are untouched. Returns the undo."""
    target = os.stat(path)
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if not os.path.samestat(os.fstat(fd), target):
            return real_write(fd, data)
        if short and len(data) > 8:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", write)
    return monkeypatch.undo
