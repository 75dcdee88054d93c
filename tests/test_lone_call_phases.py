"""A call the step runs alone (a lone call, or an exclusive one) admits, dispatches and settles
without a coroutine while nothing is to be awaited (``_scheduler._run_one``), and through the
phases as ever once something is: whether anything is is decided per call, so a listener,
guard or finalizer that appears between two steps applies to the next call."""

from __future__ import annotations

from typing import Any

import pytest
from _loop_helpers import data, new_agent, register, run

from agentloop_nb.app import App
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import Block, Deny, Tool, tool

pytestmark = pytest.mark.anyio


@tool
async def answer() -> str:
    """Answer."""
    return "answer"


def _results(agent: Any) -> list[tuple[str, Any]]:
    return [(d["content"], d.get("error", {}).get("code")) for d in data(agent, "tool/result")]


async def test_a_lone_call_after_a_pre_execute_listener_appears_goes_through_it(
    app: App,
) -> None:
    @tool
    async def listen() -> str:
        """Start denying."""
        app.ctx.on("tools/pre-execute", lambda payload, next: Deny("not now"))
        return "listening"

    register(app, listen)
    agent, _ = new_agent(
        app, tool_call("c1", "listen", {}), tool_call("c2", "listen", {}), text("done")
    )
    await run(agent)
    assert _results(agent) == [
        ("listening", None),
        ("Error: tool call denied: not now", "DENIED"),
    ]


async def test_a_lone_call_after_a_guard_appears_is_denied_by_it(app: App) -> None:
    @tool
    async def guard() -> str:
        """Start guarding."""
        app.ctx.tools.guard(lambda execution: "guarded")
        return "guarding"

    register(app, guard)
    agent, _ = new_agent(
        app, tool_call("c1", "guard", {}), tool_call("c2", "guard", {}), text("done")
    )
    await run(agent)
    assert _results(agent) == [("guarding", None), ("Error: tool call denied: guarded", "DENIED")]


async def test_a_lone_call_after_a_tools_execute_listener_appears_goes_through_it(
    app: App,
) -> None:
    seen: list[str] = []

    def on_execute(payload: Any, next: Any) -> Any:
        seen.append(payload.call_id)
        return next()

    @tool
    async def listen() -> str:
        """Start listening."""
        app.ctx.on("tools/execute", on_execute)
        app.ctx.on("tools/settled", lambda p: seen.append("settled " + p.execution.call_id))
        return "listening"

    register(app, listen, answer)
    agent, _ = new_agent(
        app, tool_call("c1", "listen", {}), tool_call("c2", "answer", {}), text("done")
    )
    await run(agent)
    # c1's own settling is announced (the listened view is live); c2 goes through both
    assert seen == ["settled c1", "c2", "settled c2"]


async def test_a_lone_call_whose_body_adds_a_post_execute_listener_is_settled_through_it(
    app: App,
) -> None:
    results: list[str] = []

    @tool
    async def listen() -> str:
        """Start blocking."""
        app.ctx.on("tools/post-execute", lambda payload, next: Block("blocked"))
        app.ctx.on("tools/result", lambda p: results.append(p.result.content))
        return "listening"

    register(app, listen)
    agent, _ = new_agent(app, tool_call("c1", "listen", {}), text("done"))
    await run(agent)
    # registered by the body, so the call's own settling (decided after it) goes through it
    assert _results(agent) == [("Error: blocked", "BLOCKED")]
    assert results == ["Error: blocked"]


async def test_a_lone_call_with_finalize_content_is_finalized(app: App) -> None:
    @tool(finalize_content=lambda result: result.content.upper())
    async def shout() -> str:
        """Shout."""
        return "quiet"

    register(app, shout)
    agent, _ = new_agent(app, tool_call("c1", "shout", {}), text("done"))
    await run(agent)
    assert _results(agent) == [("QUIET", None)]


async def test_a_lone_call_of_an_unknown_tool_is_refused_without_a_body(app: App) -> None:
    agent, _ = new_agent(app, tool_call("c1", "missing", {}), text("done"))
    await run(agent)
    [(content, code)] = _results(agent)
    assert code == "UNKNOWN_TOOL" and "missing" in content


async def test_a_lone_call_of_a_tool_defined_by_hand_runs_its_execute(app: App) -> None:
    async def execute(args: dict[str, Any], execution: Any) -> str:
        return f"ran {execution.call_id}"

    register(app, Tool("plain", "By hand.", {"type": "object"}, execute))
    agent, _ = new_agent(app, tool_call("c1", "plain", {}), text("done"))
    await run(agent)
    assert _results(agent) == [("ran c1", None)]


async def test_a_lone_call_of_a_turn_aborted_before_it_starts_gets_a_synthetic_pair(
    app: App,
) -> None:
    ran: list[str] = []

    @tool
    async def never() -> str:
        """Must not run."""
        ran.append("ran")
        return "ran"

    register(app, never)
    agent, _ = new_agent(app, tool_call("c1", "never", {}), text("done"))

    def on_event(payload: Any) -> None:
        if payload.event.type == "assistant/message":
            agent.cancel()  # the step's message is logged; its call has not started

    app.ctx.on("session/event", on_event)
    await run(agent)
    assert ran == []
    [call] = data(agent, "tool/call")
    assert call["call_id"] == "c1"
    [(_content, code)] = _results(agent)
    assert code == "ABORTED_BEFORE_DISPATCH"


async def test_a_lone_call_whose_pre_execute_listener_raises_ends_the_turn_error_with_its_result_logged(
    app: App,
) -> None:
    def boom(payload: Any, next: Any) -> Any:
        raise RuntimeError("plugin bug")

    app.ctx.on("tools/pre-execute", boom)
    register(app, answer)
    agent, _ = new_agent(app, tool_call("c1", "answer", {}), text("done"))
    await run(agent)
    [(content, code)] = _results(agent)
    assert code == "TOOL_ERROR" and "plugin bug" in content
    assert [d["reason"]["kind"] for d in data(agent, "turn/end")] == ["error"]
