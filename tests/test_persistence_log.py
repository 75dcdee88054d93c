"""What the JSONL reader and writer make of damaged logs: they agree on which bytes are
committed (only the final record may be torn), an empty or header-less file left by a crash
during create holds no session, and every bad committed line is reported as ``file:line``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _loop_helpers import OPTIONS, make_app, run, scripted

from agentloop_nb.session import (
    JsonlPersistence,
    SessionCorruptError,
    SessionEvent,
    SessionHeader,
    SessionNotFoundError,
)
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio


def write_log(root: Path, id: str, count: int, tail: bytes = b"") -> Path:
    backend = JsonlPersistence(root)
    backend.create(SessionHeader(id, cwd="/w"))
    backend.append(id, [SessionEvent("e", i, 1.0, {"i": i}) for i in range(count)])
    path = root / f"{id}.jsonl"
    with path.open("ab") as f:
        f.write(tail)
    return path


def event_line(seq: int, type: str = "e", data: object = None) -> bytes:
    body = {"type": type, "seq": seq, "time": 1.0, "data": data if data is not None else {}}
    return json.dumps(body).encode() + b"\n"


async def test_a_garbage_line_before_a_torn_tail_is_reported_by_load_and_writer_alike(
    tmp_path: Path,
) -> None:
    path = write_log(tmp_path, "s", 2, b"garbage\n" + b'{"type":"e","seq":3,"ti')
    with pytest.raises(SessionCorruptError) as loaded:
        JsonlPersistence(tmp_path).load("s")
    assert loaded.value.line == 4 and f"{path.resolve()}:4" in str(loaded.value)
    before = path.read_bytes()
    with pytest.raises(SessionCorruptError) as written:
        JsonlPersistence(tmp_path).append("s", [SessionEvent("e", 2, 1.0, {})])
    assert written.value.line == 4
    assert path.read_bytes() == before  # nothing cut, nothing appended after the garbage


async def test_resuming_a_log_with_garbage_before_a_torn_tail_names_the_line(
    tmp_path: Path,
) -> None:
    path = write_log(tmp_path, "s", 1, b"garbage\n" + b'{"type"')
    app = make_app(persistence=JsonlPersistence(tmp_path))
    with pytest.raises(SessionCorruptError, match=f"{path.resolve()}:3"):
        await app.ctx.agents.resume(resume_session_id="s")
    assert app.ctx.agents.list() == []
    await app.aclose()


@pytest.mark.parametrize("content", [b"", b'{"version":1,"id":"s"'])
async def test_a_file_left_by_a_crash_during_create_holds_no_session_and_the_id_stays_usable(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)
    backend = JsonlPersistence(tmp_path)
    with pytest.raises(SessionNotFoundError, match="crash during create"):
        backend.load("s")
    assert backend.list() == []
    app = make_app(persistence=backend)
    scripted(app, text("hello"))
    handle = await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)
    await run(handle.agent, "hi")
    await app.aclose()
    header, events = JsonlPersistence(tmp_path).load("s")
    assert header.id == "s" and "turn/end" in [e.type for e in events]


async def test_a_surface_event_that_is_not_a_message_is_rejected_at_load_naming_the_line(
    tmp_path: Path,
) -> None:
    bad = event_line(1, "user/message", {"message": {"role": "user", "content": 5}})
    path = write_log(tmp_path, "s", 1, bad + event_line(2))
    with pytest.raises(SessionCorruptError, match="does not describe a message") as info:
        JsonlPersistence(tmp_path).load("s")
    assert info.value.line == 3 and info.value.path == path.resolve()


@pytest.mark.parametrize("where", ["data", "line"])
async def test_a_deeply_nested_line_is_a_clear_error_naming_the_line(
    tmp_path: Path, where: str
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    if where == "data":
        line = b'{"type":"e","seq":1,"time":1.0,"data":{"x":' + deep + b"}}\n"
    else:
        line = deep + b"\n"
    write_log(tmp_path, "s", 1, line + event_line(2))
    with pytest.raises(SessionCorruptError, match="nested too deeply") as info:
        JsonlPersistence(tmp_path).load("s")
    assert info.value.line == 3


async def test_listing_reads_headers_only_so_a_damaged_body_still_lists(tmp_path: Path) -> None:
    write_log(tmp_path, "big", 1, b"garbage\n" * 1000 + b'{"torn')
    backend = JsonlPersistence(tmp_path)
    assert [h.id for h in backend.list()] == ["big"]
    with pytest.raises(SessionCorruptError):
        backend.load("big")
