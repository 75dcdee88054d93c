"""``agent.cancel_tool`` (one call cancelled, the turn goes on) and ``await agent.ask``
(the answer of the turn that claims the message, ``AgentTurnError`` otherwise)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _loop_helpers import WAIT, data, idle, new_agent, register, wait_for

from agentloop_nb import AgentTurnError
from agentloop_nb.app import App
from agentloop_nb.testing import HANG, combine, error, text, tool_call
from agentloop_nb.tools import ToolExecution, tool

pytestmark = pytest.mark.anyio


def _tools(app: App, started: dict[str, anyio.Event], seen: list[Any]) -> None:
    @tool(concurrency_safe=True)
    async def slow(key: str, execution: ToolExecution) -> str:
        """Wait for an abort of this call, then report it."""
        started[key].set()
        seen.append((key, await execution.signal.wait()))
        return "ended"

    @tool(concurrency_safe=True)
    async def quick(key: str, execution: ToolExecution) -> str:
        """Return once the slow call has started."""
        await started["slow"].wait()
        return f"quick {key}"

    register(app, slow, quick)


async def test_cancel_tool_gives_cancelled_and_the_turn_goes_on(app: App) -> None:
    started = {"slow": anyio.Event()}
    seen: list[Any] = []
    _tools(app, started, seen)
    both = combine(tool_call("c1", "slow", {"key": "slow"}), tool_call("c2", "quick", {"key": "q"}))
    agent, model = new_agent(app, both, text("saw it"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await started["slow"].wait()
    assert agent.cancel_tool("c1") is True
    await idle(agent)
    results = {d["call_id"]: d for d in data(agent, "tool/result")}
    assert results["c1"]["error"] == {"code": "CANCELLED", "message": "cancelled by the user"}
    assert results["c2"]["is_error"] is False
    assert [d["reason"]["kind"] for d in data(agent, "turn/end")] == ["completed"]
    assert len(seen) == 1 and seen[0][0] == "slow"
    # the model's next request carries the CANCELLED result
    tool_results = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert [(m.call_id, m.is_error) for m in tool_results] == [("c1", True), ("c2", False)]
    assert "cancelled by the user" in str(tool_results[0].content)


async def test_cancel_tool_of_a_call_not_running_is_false(app: App) -> None:
    agent, _ = new_agent(app, text("hi"))
    assert agent.cancel_tool("nope") is False
    await agent.ask("hello")
    assert agent.cancel_tool("nope") is False


async def test_cancelling_the_turn_aborts_each_call_signal_with_the_turn_reason(
    app: App,
) -> None:
    started = {"slow": anyio.Event()}
    seen: list[Any] = []
    _tools(app, started, seen)
    agent, _ = new_agent(app, tool_call("c1", "slow", {"key": "slow"}))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await started["slow"].wait()
    agent.cancel()
    await idle(agent)
    assert seen == [("slow", {"kind": "user"})]
    (result,) = data(agent, "tool/result")
    assert result["content"] == "ended"  # a body honouring a turn abort keeps its own result
    assert agent.cancel_tool("c1") is False


async def test_ask_returns_the_answer_of_its_own_turn_after_a_queued_followup(
    app: App,
) -> None:
    agent, _ = new_agent(app, text("first answer"), text("second answer"))
    agent.followup("earlier")  # queued first: turn 1 claims it (one follow-up per turn)
    answer = await agent.ask("mine", timeout=WAIT)  # claimed by turn 2
    assert answer == "second answer"
    assert [d["reason"]["kind"] for d in data(agent, "turn/end")] == ["completed", "completed"]
    assert agent.inbox.next_turn == ()


async def test_ask_raises_agent_turn_error_with_the_logged_reason(app: App) -> None:
    agent, _ = new_agent(app, error("AUTH", "bad key"))
    with pytest.raises(AgentTurnError) as info:
        await agent.ask("hi", timeout=WAIT)
    assert info.value.reason == dict(data(agent, "turn/end")[-1]["reason"])
    # the logged message is the bare one: the code is not repeated in it
    assert info.value.reason == {"kind": "error", "code": "AUTH", "message": "bad key"}
    assert info.value.turn == 1


async def test_ask_raises_when_its_message_is_discarded(app: App) -> None:
    agent, _ = new_agent(app, HANG)
    agent.followup("hang")
    await wait_for(agent, lambda e: e.type == "step/start")
    caught: list[AgentTurnError] = []

    async def ask() -> None:
        with pytest.raises(AgentTurnError) as info:
            await agent.ask("mine", timeout=WAIT)
        caught.append(info.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await wait_for(agent, lambda e: e.type == "agent/inbox/spliced" and "mine" in str(e.data))
        agent.cancel()  # clears the inbox: the asked message is never claimed
    assert caught[0].reason == {"kind": "discarded"} and caught[0].turn == 0


async def test_ask_follows_an_edited_message(app: App) -> None:
    agent, _ = new_agent(app, HANG, text("edited answer"))
    agent.followup("hang")
    await wait_for(agent, lambda e: e.type == "step/start")
    answers: list[str] = []

    async def ask() -> None:
        answers.append(await agent.ask("mine", timeout=WAIT))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await wait_for(agent, lambda e: e.type == "agent/inbox/spliced" and "mine" in str(e.data))
        (pending,) = agent.inbox.next_turn
        agent.inbox.replace(pending.id, "mine, edited")
        agent.cancel(keep_inbox=True)
        await idle(agent)
        agent.followup("again")  # the wake after a cancel runs the queued input
    assert answers == ["edited answer"]


async def test_ask_times_out_and_leaves_the_turn_running(app: App) -> None:
    agent, _ = new_agent(app, HANG)
    with pytest.raises(TimeoutError):
        await agent.ask("hi", timeout=0.05)
    assert agent.status == "running"
    agent.cancel()
    await idle(agent)
