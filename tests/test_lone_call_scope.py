"""A call the step runs alone is cancellable as an ``AbortScope(strict=False)`` around its body
makes it, whatever scope it runs in (its own, or one its turn's task holds for the bodies it
runs one after another): cancelled alone it is cancelled level-triggered, its shields are
honoured, and nothing of it reaches the next step (its request, its call)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _loop_helpers import WAIT, Shielded, data, idle, new_agent, reasons, register

from agentloop_nb.app import App
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool
async def after() -> str:
    """Await a few times (none may be cancelled) and in a nested scope, then answer."""
    for _ in range(3):
        await anyio.lowlevel.checkpoint()
    with anyio.move_on_after(WAIT) as nested:
        await anyio.lowlevel.checkpoint()
    assert not nested.cancel_called
    return "after ran"


async def cancel_c1_once_it_hangs(agent: Any, hanging: anyio.Event) -> dict[str, Any]:
    """Start the turn, cancel call ``c1`` once its body has set ``hanging``, wait for the turn
    to end; the logged ``tool/result`` data by call id."""
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await hanging.wait()
    assert agent.cancel_tool("c1") is True
    await idle(agent)
    return {d["call_id"]: d for d in data(agent, "tool/result")}


async def test_a_lone_call_cancelled_alone_is_cancelled_level_triggered_and_the_next_step_runs(
    app: App,
) -> None:
    hanging = anyio.Event()
    seen: list[str] = []

    @tool
    async def hang() -> str:
        """Wait forever; after a cancellation, try to wait again."""
        hanging.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            seen.append("cancelled")
            try:
                await anyio.lowlevel.checkpoint()
            except anyio.get_cancelled_exc_class():
                seen.append("cancelled again")  # level-triggered
                raise
        return "not cancelled"

    register(app, hang, after)
    agent, _ = new_agent(app, tool_call("c1", "hang", {}), tool_call("c2", "after", {}), text("ok"))
    results = await cancel_c1_once_it_hangs(agent, hanging)
    assert seen == ["cancelled", "cancelled again"]
    assert results["c1"]["error"]["code"] == "CANCELLED"
    assert results["c2"]["content"] == "after ran"
    assert reasons(agent) == ["completed"]


async def test_a_lone_body_cancelled_in_a_shielded_section_finishes_it_then_is_cancelled(
    app: App,
) -> None:
    body = Shielded()
    register(app, body.tool, after)
    agent, _ = new_agent(
        app, tool_call("c1", "shielded", {}), tool_call("c2", "after", {}), text("ok")
    )
    agent.followup("go")
    await body.cancel_inside(agent, "c1")
    results = {d["call_id"]: d for d in data(agent, "tool/result")}
    assert results["c1"]["error"]["code"] == "CANCELLED"
    assert results["c2"]["content"] == "after ran"
    assert reasons(agent) == ["completed"]


async def test_a_lone_body_that_returns_after_its_cancellation_is_still_cancelled_and_the_turn_goes_on(
    app: App,
) -> None:
    hanging = anyio.Event()

    @tool
    async def swallow() -> str:
        """Wait forever; answer anyway once cancelled."""
        hanging.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return "kept"
        return "never"

    register(app, swallow, after)
    agent, _ = new_agent(
        app, tool_call("c1", "swallow", {}), tool_call("c2", "after", {}), text("ok")
    )
    results = await cancel_c1_once_it_hangs(agent, hanging)
    # the user's cancellation of the call wins over what the body made of it
    assert results["c1"]["error"]["code"] == "CANCELLED"
    assert results["c2"]["content"] == "after ran"
    assert reasons(agent) == ["completed"]


async def test_a_turn_aborted_while_a_lone_body_waits_ends_aborted_with_its_result_logged(
    app: App,
) -> None:
    hanging = anyio.Event()

    @tool
    async def hang() -> str:
        """Wait forever."""
        hanging.set()
        await anyio.sleep_forever()
        return "never"

    register(app, hang)
    agent, _ = new_agent(app, tool_call("c1", "hang", {}), text("ok"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await hanging.wait()
    agent.cancel()
    await idle(agent)
    [result] = data(agent, "tool/result")
    assert result["error"]["code"] == "ABORTED"
    assert reasons(agent) == ["aborted"]


async def test_a_turn_whose_first_lone_call_comes_after_a_pooled_step_cancels_it_alone(
    app: App,
) -> None:
    # The turn's body scope is entered by its first lone body (here in step 2, after two
    # pooled calls that ran in their workers' scopes): cancelled alone, it is cancelled as in
    # a scope of its own, and the next step's call and request are not.
    from agentloop_nb.testing import combine

    hanging = anyio.Event()

    @tool(concurrency_safe=True)
    async def quick() -> str:
        """Answer at once."""
        return "quick"

    @tool
    async def hang() -> str:
        """Wait until cancelled."""
        hanging.set()
        await anyio.sleep_forever()
        return "never"

    register(app, quick, hang, after)
    agent, _ = new_agent(
        app,
        combine(tool_call("p1", "quick", {}), tool_call("p2", "quick", {})),
        tool_call("c1", "hang", {}),
        tool_call("c2", "after", {}),
        text("ok"),
    )
    results = await cancel_c1_once_it_hangs(agent, hanging)
    assert [results[i]["content"] for i in ("p1", "p2")] == ["quick", "quick"]
    assert results["c1"]["error"]["code"] == "CANCELLED"
    assert results["c2"]["content"] == "after ran"
    assert reasons(agent) == ["completed"]
