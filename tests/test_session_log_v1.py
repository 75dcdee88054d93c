"""Version-1 session logs (one ``assistant/chunk`` per streamed chunk, uncoalesced) still
load: the same messages, the same crash repair and the same view as the code that wrote them
derived (recorded in ``tests/recordings/v1/expected.json`` by ``make_v1_logs.py``)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _log_state import derived_state
from _loop_helpers import OPTIONS, make_app, run, scripted

from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import ReplayModel, text

pytestmark = pytest.mark.anyio

V1 = Path(__file__).parent / "recordings" / "v1"


def _expected(name: str) -> Any:
    return json.loads((V1 / "expected.json").read_text())[name]


@pytest.mark.parametrize("name", ["v1", "v1-crash"])
def test_a_version_1_log_derives_the_messages_repair_and_view_it_derived_when_written(
    name: str,
) -> None:
    header, _ = JsonlPersistence(V1).load(name)
    assert header.version == 1
    # JSON round trip: the expectation is JSON (tuples become lists).
    assert json.loads(json.dumps(derived_state(V1, name))) == _expected(name)


def test_the_version_1_recording_holds_every_chunk_as_streamed() -> None:
    # Guards the fixture: it must keep exercising the old form (deltas of a block one event
    # each, a tool call's argument deltas logged).
    _, events = JsonlPersistence(V1).load("v1")
    types = [e.data["chunk"]["type"] for e in events if e.type == "assistant/chunk"]
    assert "tool-call-delta" in types
    assert any(a == b == "text-delta" for a, b in itertools.pairwise(types))


async def test_a_resumed_version_1_log_goes_on_coalesced_under_its_old_header(
    tmp_path: Path,
) -> None:
    shutil.copy(V1 / "v1-crash.jsonl", tmp_path / "v1-crash.jsonl")
    before = _expected("v1-crash")
    app = make_app(persistence=JsonlPersistence(tmp_path))
    scripted(app, text("back again"))
    handle = await app.ctx.agents.resume(resume_session_id="v1-crash", agent_options=OPTIONS)
    agent = handle.agent
    await run(agent, "go on")
    await app.aclose()
    header, events = JsonlPersistence(tmp_path).load("v1-crash")
    assert header.version == 1
    new = [e.data["chunk"] for e in events if e.type == "assistant/chunk" and e.data["turn"] == 4]
    deltas = [c["text"] for c in new if c["type"] == "text-delta"]
    assert deltas == ["back again"]  # ten deltas streamed, one logged
    state = json.loads(json.dumps(derived_state(tmp_path, "v1-crash")))
    # Everything the old log derived is still there, followed by the new turn.
    assert state["messages"][: len(before["messages"])] == before["messages"]
    assert state["messages"][-1]["content"] == [{"type": "text", "text": "back again"}]
    assert state["text"].startswith(before["text"])
    assert state["text"].endswith(
        "assistant: back again\n(tokens in 10, out 10)\n── turn 4 ended: completed ──"
    )


def test_a_version_1_log_replays_its_model_calls_chunk_for_chunk() -> None:
    _, events = JsonlPersistence(V1).load("v1")
    model = ReplayModel.from_session(V1 / "v1.jsonl")
    recorded = [e for e in events if e.type == "assistant/chunk"]
    # Every chunk of a successful call or a failed attempt is replayed (the cut stream of
    # turn 3 too: its message was logged, interrupted).
    assert sum(len(call.chunks) for call in model.calls) == len(recorded)
