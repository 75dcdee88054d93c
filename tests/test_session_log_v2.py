"""Version-2 session logs (chunks coalesced, every response's ``usage`` and ``finish`` logged)
still load: the same messages, the same crash repair and the same view as the code that wrote
them derived (recorded in ``tests/recordings/v2/expected.json`` by ``make_v2_logs.py``), and
they replay chunk for chunk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _log_state import derived_state
from _loop_helpers import OPTIONS, make_app, run, scripted

from agentloop_nb.llm import assemble
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import ReplayModel, text

pytestmark = pytest.mark.anyio

V2 = Path(__file__).parent / "recordings" / "v2"


def _expected(name: str) -> Any:
    return json.loads((V2 / "expected.json").read_text())[name]


@pytest.mark.parametrize("name", ["v2", "v2-crash"])
def test_a_version_2_log_derives_the_messages_repair_and_view_it_derived_when_written(
    name: str,
) -> None:
    header, _ = JsonlPersistence(V2).load(name)
    assert header.version == 2
    # JSON round trip: the expectation is JSON (tuples become lists).
    assert json.loads(json.dumps(derived_state(V2, name))) == _expected(name)


def test_the_version_2_recording_logs_every_responses_tail() -> None:
    # Guards the fixture: it must keep exercising the old form (the usage and the finish of
    # a tool-call response and of an answer logged as chunks).
    _, events = JsonlPersistence(V2).load("v2")
    finishes = [
        e.data["chunk"]["reason"]["kind"]
        for e in events
        if e.type == "assistant/chunk" and e.data["chunk"]["type"] == "finish"
    ]
    assert {"tool-calls", "stop"} <= set(finishes)


async def test_a_resumed_version_2_log_goes_on_in_the_version_3_form_under_its_old_header(
    tmp_path: Path,
) -> None:
    shutil.copy(V2 / "v2-crash.jsonl", tmp_path / "v2-crash.jsonl")
    before = _expected("v2-crash")
    app = make_app(persistence=JsonlPersistence(tmp_path))
    scripted(app, text("back again"))
    handle = await app.ctx.agents.resume(resume_session_id="v2-crash", agent_options=OPTIONS)
    await run(handle.agent, "go on")
    await app.aclose()
    header, events = JsonlPersistence(tmp_path).load("v2-crash")
    assert header.version == 2
    new = [e.data["chunk"] for e in events if e.type == "assistant/chunk" and e.data["turn"] == 4]
    assert [c["type"] for c in new] == ["block-start", "text-delta", "block-end"]  # no tail
    state = json.loads(json.dumps(derived_state(tmp_path, "v2-crash")))
    # Everything the old log derived is still there, followed by the new turn.
    assert state["messages"][: len(before["messages"])] == before["messages"]
    assert state["messages"][-1]["content"] == [{"type": "text", "text": "back again"}]
    assert state["text"].startswith(before["text"])
    assert state["text"].endswith(
        "assistant: back again\n(tokens in 10, out 10)\n── turn 4 ended: completed ──"
    )
    # Both forms in one file replay: the new turn's tail comes back from its message.
    model = ReplayModel.from_session(tmp_path / "v2-crash.jsonl")
    streamed = text("back again")
    assert assemble(model.calls[-1].chunks) == assemble(streamed)
    assert model.calls[-1].chunks[-2:] == tuple(streamed[-2:])  # usage, finish


def test_a_version_2_log_replays_its_model_calls_chunk_for_chunk() -> None:
    _, events = JsonlPersistence(V2).load("v2")
    model = ReplayModel.from_session(V2 / "v2.jsonl")
    recorded = [e for e in events if e.type == "assistant/chunk"]
    # Every chunk of a successful call or a failed attempt is replayed, nothing added (the
    # cut stream of turn 3 too: its message was logged, interrupted).
    assert sum(len(call.chunks) for call in model.calls) == len(recorded)
