"""Global limits shared by every agent of a loop: one cap on running tool bodies
(``max_parallel_tool_calls_total``) and one on open model streams
(``max_concurrent_model_calls``), both live settings."""

from __future__ import annotations

import anyio
import pytest
from _loop_helpers import (
    OPTIONS,
    Probe,
    idle,
    reasons,
    register,
    scripted,
    wait_for,
)
from anyio import wait_all_tasks_blocked
from pydantic import ValidationError

from agentloop_nb.app import App
from agentloop_nb.testing import hang_after, text, tool_call

pytestmark = pytest.mark.anyio


async def test_global_limits_default_to_unlimited_and_refuse_non_positive_values(app: App) -> None:
    settings = app.ctx.agent_loop.settings
    assert settings.max_parallel_tool_calls_total is None
    assert settings.max_concurrent_model_calls is None
    with pytest.raises(ValidationError):
        settings.max_parallel_tool_calls_total = 0
    with pytest.raises(ValidationError):
        settings.max_concurrent_model_calls = -1
    settings.max_concurrent_model_calls = 3
    assert settings.max_concurrent_model_calls == 3


async def test_the_app_config_seeds_the_global_limits() -> None:
    app = App({"max_parallel_tool_calls_total": 4, "max_concurrent_model_calls": 2})
    try:
        settings = app.ctx.agent_loop.settings
        assert settings.max_parallel_tool_calls_total == 4
        assert settings.max_concurrent_model_calls == 2
    finally:
        await app.aclose()


async def test_total_tool_cap_bounds_bodies_across_agents_and_a_raise_admits_waiters(
    app: App,
) -> None:
    probe = Probe()
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls_total = 2
    scripted(
        app,
        *(tool_call(f"c{k}", "probe", {"key": k}) for k in "xyz"),
        *(text("done") for _ in "xyz"),
    )
    agents = [app.ctx.agent_loop.create(name, OPTIONS) for name in ("a", "b", "c")]
    for agent in agents:
        agent.followup("go")
    with anyio.fail_after(5):
        while sum(probe.is_started(k) for k in "xyz") < 2:
            await wait_all_tasks_blocked()
        await wait_all_tasks_blocked()
    gate = app.ctx.agent_loop.limits.tool_calls
    assert (probe.active, gate.held, gate.waiting) == (2, 2, 1)  # the third body waits
    app.ctx.agent_loop.settings.max_parallel_tool_calls_total = 3  # live: admits it at once
    await probe.wait_started("x", "y", "z")
    assert probe.peak == 3
    for k in "xyz":
        probe.release(k)
    for agent in agents:
        await idle(agent)
    assert [reasons(agent) for agent in agents] == [["completed"]] * 3
    assert (gate.held, gate.waiting) == (0, 0)


async def test_model_cap_holds_a_second_stream_until_the_first_ends(app: App) -> None:
    app.ctx.agent_loop.settings.max_concurrent_model_calls = 1
    model = scripted(app, hang_after(text("partial")), text("second"))
    first = app.ctx.agent_loop.create("first", OPTIONS)
    second = app.ctx.agent_loop.create("second", OPTIONS)
    first.followup("go")
    await wait_for(first, lambda e: e.type == "assistant/chunk")
    second.followup("go")
    await wait_all_tasks_blocked()
    assert len(model.requests) == 1  # the second request waits for the gate
    assert app.ctx.agent_loop.limits.model_calls.waiting == 1
    first.cancel()
    await idle(first)
    await idle(second)
    assert reasons(first) == ["aborted"]
    assert reasons(second) == ["completed"]
    assert len(model.requests) == 2


async def test_cancelling_a_turn_waiting_for_a_model_slot_ends_it_aborted(app: App) -> None:
    app.ctx.agent_loop.settings.max_concurrent_model_calls = 1
    model = scripted(app, hang_after(text("partial")))
    first = app.ctx.agent_loop.create("first", OPTIONS)
    waiting = app.ctx.agent_loop.create("waiting", OPTIONS)
    first.followup("go")
    await wait_for(first, lambda e: e.type == "assistant/chunk")
    waiting.followup("go")
    await wait_all_tasks_blocked()
    gate = app.ctx.agent_loop.limits.model_calls
    assert gate.waiting == 1
    waiting.cancel()
    await idle(waiting)
    assert reasons(waiting) == ["aborted"]
    assert (gate.held, gate.waiting, len(model.requests)) == (1, 0, 1)
    first.cancel()
    await idle(first)
    assert gate.held == 0


async def test_a_call_aborted_while_waiting_for_a_tool_slot_never_starts(app: App) -> None:
    probe = Probe()
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls_total = 1
    scripted(app, tool_call("c1", "probe", {"key": "x"}), tool_call("c2", "probe", {"key": "y"}))
    holder = app.ctx.agent_loop.create("holder", OPTIONS)
    waiter = app.ctx.agent_loop.create("waiter", OPTIONS)
    holder.followup("go")
    await probe.wait_started("x")
    waiter.followup("go")
    await wait_for(waiter, lambda e: e.type == "tool/call")
    gate = app.ctx.agent_loop.limits.tool_calls
    with anyio.fail_after(5):
        while gate.waiting == 0:
            await wait_all_tasks_blocked()
    waiter.cancel()
    await idle(waiter)
    (result,) = [e.data for e in waiter.session.events if e.type == "tool/result"]
    assert result["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert not probe.is_started("y") and gate.waiting == 0
    holder.cancel()
    await idle(holder)
    assert gate.held == 0
