"""Listing JSONL sessions reads each file's header line only: ten 5 MB sessions cost a few
kilobytes of reads, and a file whose header cannot be read is listed as unreadable with the
reason, never hiding the others. (The timing is in ``benchmarks/bench_listing.py``; these
tests assert on the work done.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentloop_nb.session import (
    JsonlPersistence,
    SessionEvent,
    SessionHeader,
    StoredSession,
    list_sessions,
)

MB = 1 << 20
PROC_IO = Path("/proc/self/io")


def bytes_read() -> int:
    """Bytes this process has read through ``read`` system calls so far (Linux)."""
    for line in PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no rchar line")


@contextmanager
def counting() -> Iterator[list[int]]:
    """``with counting() as read:`` — ``read[0]`` is the bytes read inside the block."""
    if not PROC_IO.exists():
        pytest.skip("counting bytes read needs Linux's /proc/self/io")
    read = [0]
    before = bytes_read()
    yield read
    read[0] = bytes_read() - before


def big_session(backend: JsonlPersistence, id: str, created_at: float, size: int) -> None:
    """A stored session of about ``size`` bytes (one turn whose message text is large)."""
    backend.create(SessionHeader(id, created_at=created_at, meta={"title": id}))
    filler = "x" * (size // 4)
    backend.append(
        id,
        [SessionEvent("turn/start", i, 1.0, {"turn": i, "note": filler}) for i in range(4)],
    )


def test_listing_ten_sessions_of_five_megabytes_reads_only_their_headers(tmp_path: Path) -> None:
    backend = JsonlPersistence(tmp_path)
    for i in range(10):
        big_session(backend, f"s{i}", float(i), 5 * MB)
    total = sum(p.stat().st_size for p in tmp_path.glob("*.jsonl"))
    assert total > 50 * MB
    with counting() as read:
        listing = JsonlPersistence(tmp_path).scan()
    assert [e.id for e in listing] == [f"s{i}" for i in range(10)]
    assert all(e.readable for e in listing)
    assert listing[3].header is not None and listing[3].header.meta["title"] == "s3"
    assert read[0] < 10 * 16 * 1024  # one 4 KiB read per header, not 50 MB of events
    with counting() as read:
        headers = JsonlPersistence(tmp_path).list()
    assert len(headers) == 10 and read[0] < 10 * 16 * 1024


def test_a_header_line_too_long_to_be_a_header_is_reported_after_a_bounded_read(
    tmp_path: Path,
) -> None:
    JsonlPersistence(tmp_path).create(SessionHeader("good", created_at=1.0))
    (tmp_path / "huge.jsonl").write_bytes(b"[" + b"1," * (3 * MB) + b"1]\n")
    with counting() as read:
        listing = JsonlPersistence(tmp_path).scan()
    assert [(e.id, e.readable) for e in listing] == [("good", True), ("huge", False)]
    assert listing[1].problem is not None and "longer than" in listing[1].problem
    assert read[0] < 2 * MB  # stops at the header cap, never reads the 6 MB line


@pytest.mark.parametrize(
    ("name", "make", "reason"),
    [
        ("garbage", lambda p: p.write_bytes(b"\x00\xff not json\n"), "bad header"),
        ("list", lambda p: p.write_bytes(b"[1, 2]\n"), "not a session header"),
        (
            "renamed",
            lambda p: p.write_text(SessionHeader("other", created_at=1.0).to_json() + "\n"),
            "names session 'other', not 'renamed'",
        ),
        ("directory", lambda p: p.mkdir(), "cannot read the file: Is a directory"),
    ],
)
def test_an_unreadable_session_is_listed_with_its_reason_after_the_readable_ones(
    tmp_path: Path, name: str, make: object, reason: str
) -> None:
    backend = JsonlPersistence(tmp_path)
    backend.create(SessionHeader("a", created_at=2.0))
    backend.create(SessionHeader("z", created_at=1.0))
    make(tmp_path / f"{name}.jsonl")  # type: ignore[operator]
    listing = backend.scan()
    assert [(e.id, e.readable) for e in listing] == [("z", True), ("a", True), (name, False)]
    assert listing[-1].problem is not None and reason in listing[-1].problem
    assert listing[-1].where == str(tmp_path / f"{name}.jsonl")


def test_a_file_without_a_complete_header_line_holds_no_session_and_is_not_listed(
    tmp_path: Path,
) -> None:
    (tmp_path / "torn.jsonl").write_bytes(b'{"type": "session", "id": "tor')  # crash in create
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert JsonlPersistence(tmp_path).scan() == []
    assert JsonlPersistence(tmp_path / "missing").scan() == []


def test_list_sessions_wraps_a_backend_that_only_lists_headers() -> None:
    class Minimal:
        def list(self) -> list[SessionHeader]:
            return [SessionHeader("only", created_at=1.0)]

    [entry] = list_sessions(Minimal())
    assert entry == StoredSession("only", "only", entry.header)
    assert entry.readable and entry.header is not None and entry.header.id == "only"
