"""Replay: a recorded session answers the same inputs identically; a changed input fails the
turn with ``REPLAY_DIVERGED`` naming the first differing message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import OPTIONS, data, make_app, reasons, register, run, scripted

from agentloop_nb.app import App
from agentloop_nb.loop import Agent, AgentOptions
from agentloop_nb.session import JsonlPersistence, SessionNotFoundError
from agentloop_nb.testing import REPLAY_DIVERGED, ReplayModel, error, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio

PROMPTS = ("add 2 and 3", "and now say thanks")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def no_wait(_seconds: float) -> None:
    return None


def fresh_app(**kw: Any) -> App:
    app = make_app(**kw)
    app.ctx.retry.sleep = no_wait
    register(app, add)
    return app


async def record(app: App) -> Agent:
    """Two turns against a scripted model: a failed attempt that the retry plugin retries, a
    tool call, its answer, then a plain answer."""
    scripted(
        app,
        error("SERVER", "flaky"),
        tool_call("c1", "add", {"a": 2, "b": 3}, text="let me add"),
        text("2 + 3 = 5"),
        text("thanks!"),
    )
    handle = await app.ctx.agents.create(session_id="rec", agent_options=OPTIONS)
    for prompt in PROMPTS:
        await run(handle.agent, prompt)
    return handle.agent


def answers(agent: Agent) -> list[Any]:
    """What the model said and what the tools returned, without ids and times."""
    return [
        (e.type, e.data.get("message", {}).get("content") or e.data.get("content"))
        for e in agent.session.events
        if e.type in ("assistant/message", "tool/result")
    ]


async def replay(model: ReplayModel, prompts: tuple[str, ...] = PROMPTS) -> Agent:
    app = fresh_app()
    app.ctx.llm.register_adapter(["scripted"], model)
    handle = await app.ctx.agents.create(session_id="again", agent_options=OPTIONS)
    for prompt in prompts:
        await run(handle.agent, prompt)
    return handle.agent


async def test_replaying_a_session_on_the_same_inputs_gives_the_same_log() -> None:
    app = fresh_app()
    recorded = await record(app)
    model = ReplayModel.from_session(recorded.session)
    assert len(model.calls) == 4  # the failed attempt is a recorded call too
    again = await replay(model)
    assert answers(again) == answers(recorded)
    assert reasons(again) == ["completed", "completed"]
    assert len(data(again, "assistant/attempt")) == 1 and model.remaining == 0
    await app.aclose()


async def test_replaying_a_stored_jsonl_file(tmp_path: Path) -> None:
    app = fresh_app(persistence=JsonlPersistence(tmp_path))
    recorded = await record(app)
    expected = answers(recorded)
    await app.aclose()
    again = await replay(ReplayModel.from_session(tmp_path / "rec.jsonl"))
    assert answers(again) == expected
    again_from_str = await replay(ReplayModel.from_session(str(tmp_path / "rec.jsonl")))
    assert answers(again_from_str) == expected


async def test_a_changed_first_prompt_fails_with_replay_diverged_at_message_0() -> None:
    app = fresh_app()
    recorded = await record(app)
    again = await replay(ReplayModel.from_session(recorded.session), ("add 2 and 4",))
    (end,) = data(again, "turn/end")
    assert end["reason"]["kind"] == "error" and end["reason"]["code"] == REPLAY_DIVERGED
    assert "message 0 differs" in end["reason"]["message"]
    assert data(again, "tool/result") == []
    await app.aclose()


async def test_a_changed_later_prompt_names_the_first_differing_message() -> None:
    app = fresh_app()
    recorded = await record(app)
    again = await replay(
        ReplayModel.from_session(recorded.session), (PROMPTS[0], "and now say sorry")
    )
    first, second = data(again, "turn/end")
    assert first["reason"]["kind"] == "completed"
    assert second["reason"]["code"] == REPLAY_DIVERGED
    # user, assistant (tool call), tool result, assistant answer, then the changed prompt
    assert "message 4 differs" in second["reason"]["message"]
    await app.aclose()


async def test_a_changed_tool_result_diverges_on_the_next_request() -> None:
    app = fresh_app()
    recorded = await record(app)
    model = ReplayModel.from_session(recorded.session)
    app2 = make_app()
    app2.ctx.retry.sleep = no_wait

    @tool(name="add")
    def wrong_add(a: int, b: int) -> int:
        """Add two integers (badly)."""
        return a + b + 1

    register(app2, wrong_add)
    app2.ctx.llm.register_adapter(["scripted"], model)
    handle = await app2.ctx.agents.create(session_id="again", agent_options=OPTIONS)
    await run(handle.agent, PROMPTS[0])
    (end,) = data(handle.agent, "turn/end")
    assert end["reason"]["code"] == REPLAY_DIVERGED
    assert "message 2 differs: recorded tool '5', got tool '6'" in end["reason"]["message"]
    await app.aclose()
    await app2.aclose()


async def test_non_strict_replay_answers_whatever_was_asked() -> None:
    app = fresh_app()
    recorded = await record(app)
    again = await replay(
        ReplayModel.from_session(recorded.session, strict=False), ("something else", "more")
    )
    assert answers(again) == answers(recorded)
    await app.aclose()


async def test_a_request_beyond_the_recording_is_an_error_turn() -> None:
    app = fresh_app()
    recorded = await record(app)
    again = await replay(ReplayModel.from_session(recorded.session), (*PROMPTS, "one more"))
    assert data(again, "turn/end")[-1]["reason"]["code"] == "REPLAY_EXHAUSTED"
    await app.aclose()


def test_a_path_that_is_not_a_stored_session_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"not a session \.jsonl file"):
        ReplayModel.from_session(tmp_path / "notes.txt")
    with pytest.raises(SessionNotFoundError):
        ReplayModel.from_session(tmp_path / "missing.jsonl")


# -- a session recorded against a real model ---------------------------------------------------

# Recorded against llama.cpp's llama-server serving Gemma 3 270M at temperature 0 (the
# realmodel tests' server and chat template): three few-shot turns seeded, then one live turn
# in which the model called ``add`` and answered (until max tokens: it is a base model).
RECORDING = Path(__file__).parent / "recordings" / "llamacpp-add.jsonl"


@tool(name="add")
def real_add(a: int, b: int) -> int:
    """Add two integers and return their sum."""
    return a + b


async def replay_recording(question: str) -> tuple[Agent, list[Any]]:
    """A fresh agent seeded with the recording's few-shot turns, asked ``question`` and
    answered by the recording (its ``add`` tool runs for real). Returns the agent and the
    recorded events."""
    _, recorded = JsonlPersistence(RECORDING.parent).load(RECORDING.stem)
    live = next(e.seq for e in recorded if e.type == "agent/inbox/spliced")
    seed = [{"type": e.type, "data": e.data} for e in recorded[:live]]
    app = make_app()
    app.ctx.tools.register(real_add)
    app.ctx.llm.register_adapter(["replay"], ReplayModel.from_session(RECORDING))
    handle = await app.ctx.agents.create(
        session_id="replayed",
        agent_options=AgentOptions(provider="replay", model="gemma-3-270m"),
        seed=seed,
    )
    await run(handle.agent, question)
    await app.aclose()
    return handle.agent, recorded


def model_side(events: list[Any]) -> list[Any]:
    return [
        (e.type, e.data.get("message", {}).get("content") or e.data.get("content"))
        for e in events
        if e.type in ("assistant/message", "tool/result")
    ]


async def test_a_real_model_recording_replays_identically() -> None:
    agent, recorded = await replay_recording("What is 17 plus 25?")
    assert model_side(agent.session.events) == model_side(recorded)
    (call,) = data(agent, "tool/call")
    assert (call["name"], call["arguments"]) == ("add", '{"a": 17, "b": 25}')
    assert data(agent, "tool/result")[-1]["content"] == "42"
    final = data(agent, "assistant/message")[-1]["message"]["content"][0]["text"]
    assert final.startswith("17 plus 25 is 42.")
    # The same end (the recording numbered its turn 1: it predates seeded turns counting on).
    assert [e.data for e in agent.session.events if e.type == "turn/end"][-1]["reason"] == [
        e.data for e in recorded if e.type == "turn/end"
    ][-1]["reason"]


async def test_a_real_model_recording_diverges_on_a_changed_question() -> None:
    agent, _ = await replay_recording("What is 17 plus 26?")
    end = data(agent, "turn/end")[-1]
    assert end["reason"]["code"] == REPLAY_DIVERGED
    # 3 few-shot turns of 4 messages each, then the changed question
    assert "message 12 differs" in end["reason"]["message"]
