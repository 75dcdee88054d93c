"""Session logs of earlier versions still load: version 1 (one ``assistant/chunk`` per
streamed chunk) and version 2 (chunks coalesced, every response's ``usage`` and ``finish``
logged) derive the same messages, crash repair and view as the code that wrote them
(``tests/recordings/v<n>/expected.json``, recorded by ``make_v<n>_logs.py``), replay chunk for
chunk, and go on in the current form under their old header when resumed."""

from __future__ import annotations

import itertools
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

RECORDINGS = Path(__file__).parent / "recordings"
VERSIONS = (1, 2)


def _expected(version: int, name: str) -> Any:
    return json.loads((RECORDINGS / f"v{version}" / "expected.json").read_text())[name]


def _chunk_types(version: int) -> list[str]:
    _, events = JsonlPersistence(RECORDINGS / f"v{version}").load(f"v{version}")
    return [e.data["chunk"]["type"] for e in events if e.type == "assistant/chunk"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("crash", ["", "-crash"])
def test_an_old_log_derives_the_messages_repair_and_view_it_derived_when_written(
    version: int, crash: str
) -> None:
    root, name = RECORDINGS / f"v{version}", f"v{version}{crash}"
    header, _ = JsonlPersistence(root).load(name)
    assert header.version == version
    # JSON round trip: the expectation is JSON (tuples become lists).
    assert json.loads(json.dumps(derived_state(root, name))) == _expected(version, name)


def test_the_version_1_recording_holds_every_chunk_as_streamed() -> None:
    # Guards the fixture: it must keep exercising the old form (deltas of a block one event
    # each, a tool call's argument deltas logged).
    types = _chunk_types(1)
    assert "tool-call-delta" in types
    assert any(a == b == "text-delta" for a, b in itertools.pairwise(types))


def test_the_version_2_recording_logs_every_responses_tail() -> None:
    # Guards the fixture: it must keep exercising the old form (the usage and the finish of
    # a tool-call response and of an answer logged as chunks).
    _, events = JsonlPersistence(RECORDINGS / "v2").load("v2")
    finishes = [
        e.data["chunk"]["reason"]["kind"]
        for e in events
        if e.type == "assistant/chunk" and e.data["chunk"]["type"] == "finish"
    ]
    assert {"tool-calls", "stop"} <= set(finishes)


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_resumed_old_log_goes_on_in_the_current_form_under_its_old_header(
    tmp_path: Path, version: int
) -> None:
    name = f"v{version}-crash"
    shutil.copy(RECORDINGS / f"v{version}" / f"{name}.jsonl", tmp_path / f"{name}.jsonl")
    before = _expected(version, name)
    app = make_app(persistence=JsonlPersistence(tmp_path))
    scripted(app, text("back again"))
    handle = await app.ctx.agents.resume(resume_session_id=name, agent_options=OPTIONS)
    await run(handle.agent, "go on")
    await app.aclose()
    header, events = JsonlPersistence(tmp_path).load(name)
    assert header.version == version
    new = [e.data["chunk"] for e in events if e.type == "assistant/chunk" and e.data["turn"] == 4]
    # Ten deltas streamed, one logged; the usage and the finish left to the message.
    assert new[1] == {"type": "text-delta", "index": 0, "text": "back again"}
    assert [c["type"] for c in new] == ["block-start", "text-delta", "block-end"]
    state = json.loads(json.dumps(derived_state(tmp_path, name)))
    # Everything the old log derived is still there, followed by the new turn.
    assert state["messages"][: len(before["messages"])] == before["messages"]
    assert state["messages"][-1]["content"] == [{"type": "text", "text": "back again"}]
    assert state["text"].startswith(before["text"])
    assert state["text"].endswith(
        "assistant: back again\n(tokens in 10, out 10)\n── turn 4 ended: completed ──"
    )
    # Both forms in one file replay: the new turn's tail comes back from its message.
    model = ReplayModel.from_session(tmp_path / f"{name}.jsonl")
    streamed = text("back again")
    assert assemble(model.calls[-1].chunks) == assemble(streamed)
    assert model.calls[-1].chunks[-2:] == tuple(streamed[-2:])  # usage, finish


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_log_replays_its_model_calls_chunk_for_chunk(version: int) -> None:
    # Every chunk of a successful call or a failed attempt is replayed, nothing added (the
    # cut stream of turn 3 too: its message was logged, interrupted).
    model = ReplayModel.from_session(RECORDINGS / f"v{version}" / f"v{version}.jsonl")
    assert sum(len(call.chunks) for call in model.calls) == len(_chunk_types(version))
