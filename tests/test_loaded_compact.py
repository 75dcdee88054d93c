"""A loaded session holds what it reads once and compactly: surface events are parsed into
messages once (at load) and those are the messages it derives, the messages share their
field-name sets, a chunk event keeps no mapping of its own, equal dicts holding shared dicts
are one object, and source seqs are the events' own ints. Nothing a reader sees changes: the
events equal the live ones, encode to the same lines and derive the same messages."""

from __future__ import annotations

import json
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import OPTIONS, make_app, register, run, scripted

from agentloop_nb.session import FrozenDict, JsonlPersistence, SessionEvent, SessionStore
from agentloop_nb.session import _jsonl_codec as codec
from agentloop_nb.session import _nodes as nodes_module
from agentloop_nb.session import _session as session_module
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool
def look_up(q: int, why: str = "") -> str:
    """A result of its own for each question."""
    return f"entry {q}: " + "details of the entry " * 3


async def _write(root: Path, steps: int, sid: str = "s") -> list[Any]:
    """A session of ``steps`` tool steps (each with its own text preamble) and an answer;
    returns the live session's messages."""
    app = make_app(persistence=JsonlPersistence(root))
    register(app, look_up)
    script = [
        tool_call(
            f"c{i}",
            "look_up",
            {"q": i, "why": f"the user asked question {i}"},
            text=f"Step {i}: let me look that up for you.",
        )
        for i in range(steps)
    ]
    scripted(app, *script, text("Here is everything I found."))
    handle = await app.ctx.agents.create(session_id=sid, agent_options=OPTIONS)
    await run(handle.agent, "question")
    live = [list(handle.agent.session.events), handle.agent.session.derive_messages()]
    await app.aclose()
    return live


def _load(root: Path, sid: str = "s") -> Any:
    header, events = JsonlPersistence(root).load(sid)
    return SessionStore().prepare(header=header, events=events)


@pytest.mark.parametrize("window", [None, 8])
async def test_a_loaded_session_equals_the_live_one_event_for_event_and_line_for_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int | None
) -> None:
    live_events, live_messages = await _write(tmp_path, 5)
    if window is not None:  # a loader that starts sharing anew every few records
        monkeypatch.setattr(codec, "SHARED_WINDOW", window)
    session = _load(tmp_path)
    assert list(session.events) == live_events
    assert session.derive_messages() == live_messages
    lines = (tmp_path / "s.jsonl").read_text().splitlines()[1:]
    assert [e.to_json() for e in session.events] == lines
    logged = [json.loads(line)["data"] for line in lines]
    assert logged == [json.loads(json.dumps(e.data)) for e in session.events]


async def test_a_loaded_chunk_event_reads_as_the_mapping_it_logged(tmp_path: Path) -> None:
    await _write(tmp_path, 2)
    chunks = [e for e in _load(tmp_path).events if e.type == "assistant/chunk"]
    assert chunks
    for event in chunks:
        assert isinstance(event, SessionEvent)
        data = event.data
        assert type(data) is FrozenDict and list(data) == ["turn", "step", "chunk"]
        assert type(data["chunk"]) is FrozenDict and data["chunk"] is event.data["chunk"]
        assert data == event.data and event == SessionEvent.from_dict(event.to_dict())
        assert pickle.loads(pickle.dumps(event)) == event
        assert repr(event).startswith("SessionEvent(type='assistant/chunk', seq=")
        with pytest.raises(TypeError):
            data["turn"] = 9  # type: ignore[index]
        with pytest.raises(AttributeError):
            event.data = FrozenDict()  # type: ignore[misc]
    assert type(type(chunks[0]).from_dict(chunks[0].to_dict())) is SessionEvent


async def test_a_loaded_session_parses_each_surface_event_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _write(tmp_path, 3)
    parsed: list[int] = []
    parse = session_module.parse_node

    def counting(event_type: str, data: FrozenDict, seq: int) -> Any:
        parsed.append(seq)
        return parse(event_type, data, seq)

    # the loader parses through ``_nodes``, the session's derivation through ``_session``
    monkeypatch.setattr(nodes_module, "parse_node", counting)
    monkeypatch.setattr(session_module, "parse_node", counting)
    session = _load(tmp_path)
    at_load = len(parsed)
    assert at_load == sum(e.type in session_module.SURFACE_TYPES for e in session.events)
    session.derive_messages()
    assert len(parsed) == at_load  # derived from what the load parsed


async def test_a_replaced_loaded_event_derives_its_own_message(tmp_path: Path) -> None:
    await _write(tmp_path, 1)
    header, events = JsonlPersistence(tmp_path).load("s")
    seq = next(e.seq for e in events if e.type == "user/message")
    old = events[seq]
    message = {**old.data["message"], "content": [{"type": "text", "text": "edited"}]}
    events[seq] = SessionEvent(old.type, seq, old.time, {"message": message})
    session = SessionStore().prepare(header=header, events=events)
    assert session.derive_messages()[0].text == "edited"


async def test_messages_of_a_loaded_session_share_their_field_name_sets(tmp_path: Path) -> None:
    await _write(tmp_path, 3)
    messages = _load(tmp_path).derive_messages()
    results = [m for m in messages if m.role == "tool"]
    assert len(results) == 3
    assert results[0].model_fields_set is results[1].model_fields_set
    assert results[0].model_fields_set == {"call_id", "name", "content", "is_error"}
    calls = [m.content[1] for m in messages if m.role == "assistant" and m.tool_calls]
    assert calls[0].model_fields_set is calls[2].model_fields_set
    changed = results[0].model_copy(update={"is_error": True})
    assert changed.is_error and not results[1].is_error
    assert results[1].model_fields_set == {"call_id", "name", "content", "is_error"}


async def test_a_loaded_step_holds_its_text_and_tool_call_once(tmp_path: Path) -> None:
    await _write(tmp_path, 2)
    session = _load(tmp_path)
    events = list(session.events)
    chunks = [e.data["chunk"] for e in events if e.type == "assistant/chunk"]
    deltas = [c["text"] for c in chunks if c["type"] == "text-delta"]
    blocks = [c["block"] for c in chunks if c.get("block")]
    messages = [e.data["message"] for e in events if e.type == "assistant/message"]
    calls = [e.data for e in events if e.type == "tool/call"]
    for i in range(2):
        text_block, call_block = messages[i]["content"]
        assert text_block["text"] is deltas[i] and len(deltas[i]) > 16
        assert call_block is blocks[i] and len(call_block["arguments"]) > 16
        assert calls[i]["arguments"] is call_block["arguments"]
    derived = [m for m in session.derive_messages() if m.role == "assistant" and m.tool_calls]
    assert derived[1].text is deltas[1]
    assert derived[1].tool_calls[0].arguments is calls[1]["arguments"]


def test_equal_dicts_holding_shared_dicts_are_one_object(tmp_path: Path) -> None:
    header = {"type": "session", "version": 2, "id": "m", "created_at": 1.0, "cwd": None}
    finish = {"type": "finish", "reason": {"kind": "stop"}}
    datas = [{"c": finish}, {"c": finish}, {"c": {"type": "finish", "reason": {"kind": "x"}}}]
    lines = [json.dumps({**header, "meta": {}})]
    lines += [
        json.dumps({"type": "x/y", "seq": i, "time": 1.0, "data": d}) for i, d in enumerate(datas)
    ]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    _, events = JsonlPersistence(tmp_path).load("m")
    assert events[0].data["c"] is events[1].data["c"]
    assert events[0].data["c"] == finish and events[2].data["c"] != finish


async def test_source_seqs_of_a_loaded_event_are_the_events_own_seqs(tmp_path: Path) -> None:
    await _write(tmp_path, 40)  # past seq 256: ints Python does not cache
    events = _load(tmp_path).events
    late = [e for e in events if e.source_event_seqs and e.seq > 300]
    assert late
    for event in late:
        assert all(events[s].seq is s for s in event.source_event_seqs)


async def test_a_loaded_session_holds_at_most_three_times_its_file(tmp_path: Path) -> None:
    await _write(tmp_path, 150)
    size = (tmp_path / "s.jsonl").stat().st_size
    _load(tmp_path).derive_messages()  # what a first load builds once per process: not counted
    tracemalloc.start()
    try:
        session = _load(tmp_path)
        messages = session.derive_messages()
        heap, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(messages) > 300
    assert heap <= 3 * size, f"{heap / size:.2f}x the file"
