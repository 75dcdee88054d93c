"""``ToolPoolView`` derives from the session log and hook events only: states, durations,
the timeline and approvals, driven in-process (no kernel)."""

from __future__ import annotations

import asyncio
import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
from _view_helpers import asking_view, scripted_agent, scripted_app

from agentloop_nb.app import App
from agentloop_nb.jupyter import AgentView, ToolPoolView, WidgetApproval
from agentloop_nb.jupyter.fold import item_text
from agentloop_nb.loop import AgentOptions
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import Ask, Deny, ToolResult, tool


def _pool_row(table: str, call_id: str) -> str:
    match = re.search(rf'<tr [^>]*data-call-id="{call_id}">.*?</tr>', table)
    assert match is not None, table
    return match.group(0)


def _duration_cell(row: str) -> str:
    match = re.search(r'<td class="agentloop-pool-duration">(.*?)</td>', row)
    assert match is not None, row
    return match.group(1)


@pytest.mark.anyio
async def test_calls_whose_body_never_ran_show_their_own_state_and_no_duration() -> None:
    running = asyncio.Event()
    release = asyncio.Event()

    @tool(concurrency_safe=True)
    async def wait(tag: str) -> str:
        """Wait for the test to release it."""
        running.set()
        await release.wait()
        return f"ok {tag}"

    async def refuse(execution: Any, next: Any) -> Any:
        return Deny(reason="not this one") if execution.args == {"tag": "no"} else await next()

    app, _ = scripted_app(
        [
            combine(
                tool_call("c1", "wait", {"tag": "a"}),
                tool_call("c2", "wait", {"tag": 5}),  # breaks the schema: INVALID_ARGS
                tool_call("c3", "wait", {"tag": "no"}),  # DENIED by the listener
            ),
            text("done"),
        ]
    )
    app.ctx.tools.register(wait)
    app.ctx.on("tools/pre-execute", refuse)
    agent = scripted_agent(app)
    view = AgentView(agent)
    agent.followup("go")
    await running.wait()
    release.set()  # c2 and c3 were settled long before: their results wait for c1's commit
    await agent.when_idle()
    view.flush()
    lines = view.text.splitlines()
    assert any(line.startswith('tool wait({"tag": 5}) [invalid] → Error:') for line in lines)
    assert any(line.startswith('tool wait({"tag": "no"}) [denied] → Error:') for line in lines)
    table = view.pool_view.table.value
    for call_id, state in (("c2", "invalid"), ("c3", "denied")):
        row = _pool_row(table, call_id)
        assert f">{state}</td>" in row
        assert "agentloop-bar" not in row and _duration_cell(row) == ""
    ran = _pool_row(table, "c1")
    assert "agentloop-bar-done" in ran and "width:100.00%" in ran
    assert _duration_cell(ran).endswith("s")
    # the call that ran is timed from its logged tool/call to the moment its body settled
    # (tools/settled), which is no later than its committed tool/result
    logged = {
        (e.type, e.data["call_id"]): e.time for e in agent.session.events if "call_id" in e.data
    }
    item = view.transcript.call("c1")
    assert item is not None
    started, committed = logged[("tool/call", "c1")], logged[("tool/result", "c1")]
    ended = item.data["ended"]
    assert item.data["started"] == started and ended == item.data["settled"]
    assert started <= ended <= committed
    assert f"[done] ({ended - started:.2f}s)" in item_text(item)
    view.close()
    await app.aclose()


def _seeded_pool(calls: list[tuple[str, str, float, float]]) -> list[dict[str, Any]]:
    """A finished step's log, at chosen times: each call is ``(call_id, name, started,
    ended)``; its ``tool/call`` and ``tool/result`` are logged at those epoch seconds."""
    blocks = [{"type": "tool-call", "id": c, "name": n, "arguments": "{}"} for c, n, _, _ in calls]
    events: list[dict[str, Any]] = [
        {"type": "turn/start", "data": {"turn": 1}, "time": 999.0},
        {
            "type": "assistant/message",
            "data": {"turn": 1, "step": 1, "message": {"role": "assistant", "content": blocks}},
            "time": 999.0,
        },
    ]
    base = {"turn": 1, "step": 1}
    for call_id, name, started, ended in calls:
        ids = {**base, "call_id": call_id, "name": name}
        events.append({"type": "tool/call", "data": {**ids, "arguments": "{}"}, "time": started})
        result = {**ids, "content": "ok", "is_error": False}
        events.append({"type": "tool/result", "data": result, "time": ended})
    events.append({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}})
    return events


async def _seeded_agent(app: App, seed: list[dict[str, Any]]) -> Any:
    options = AgentOptions(provider="scripted", model="m")
    handle = await app.ctx.agents.create(session_id="seeded", agent_options=options, seed=seed)
    return handle.agent


@pytest.mark.anyio
async def test_the_only_call_of_a_step_fills_the_timeline_however_fast_it_was() -> None:
    app, _ = scripted_app([])
    agent = await _seeded_agent(app, _seeded_pool([("c1", "instant", 1000.0, 1000.0)]))
    view = AgentView(agent)
    row = _pool_row(view.pool_view.table.value, "c1")
    assert "left:0.00%;width:100.00%" in row
    assert _duration_cell(row) == "0.00s"
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_an_instant_call_beside_a_long_one_keeps_a_visible_bar_inside_the_timeline() -> None:
    app, _ = scripted_app([])
    seed = _seeded_pool([("c1", "long", 1000.0, 1005.0), ("c2", "instant", 1005.0, 1005.0)])
    agent = await _seeded_agent(app, seed)
    view = AgentView(agent)
    table = view.pool_view.table.value
    assert "left:0.00%;width:100.00%" in _pool_row(table, "c1")
    assert _duration_cell(_pool_row(table, "c1")) == "5.00s"
    # the instant call starts where the long one ended: a minimal bar, still inside the track
    assert "left:99.00%;width:1.00%" in _pool_row(table, "c2")
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_an_unanswered_approval_says_no_one_answered_rather_than_declined() -> None:
    @tool
    def danger() -> str:
        """Needs approval."""
        return "ran"

    app, model = scripted_app([tool_call("c1", "danger", {}), text("done")])
    app.ctx.provide("approval", WidgetApproval(timeout=0.05))
    app.ctx.tools.register(danger)
    app.ctx.on("tools/pre-execute", lambda execution, next: Ask(reason="risky"))
    agent = scripted_agent(app)
    view = AgentView(agent)
    agent.followup("go")
    await agent.when_idle()
    view.flush()
    result = next(e.data for e in agent.session.events if e.type == "tool/result")
    expected = (
        "Error: tool call denied: no one answered the approval request (risky) within 0.05 s; "
        "denied by default"
    )
    assert result["error"]["code"] == "DENIED" and result["content"] == expected
    assert result["meta"] == {"approval": "timeout", "timeout": 0.05}
    assert "declined" not in result["content"]
    sent = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert [m.content for m in sent] == [expected]  # the model is told, too
    row = _pool_row(view.pool_view.table.value, "c1")
    assert ">denied</td>" in row and "agentloop-bar" not in row
    view.close()
    await app.aclose()


_EXECUTION_HOOKS = ("tools/pre-execute", "tools/execute", "tools/post-execute", "tools/result")


@pytest.mark.anyio
async def test_views_only_read_they_add_no_listener_to_tool_execution() -> None:
    app, _ = scripted_app([])
    agent = scripted_agent(app)
    before = {hook: agent.ctx.has_listeners(hook) for hook in _EXECUTION_HOOKS}
    view = AgentView(agent)
    pool = ToolPoolView(agent)
    assert {hook: agent.ctx.has_listeners(hook) for hook in _EXECUTION_HOOKS} == before
    pool.close()
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_settled_call_shows_done_while_an_earlier_call_still_runs() -> None:
    started: list[str] = []
    both_started = asyncio.Event()
    release = asyncio.Event()

    @tool(concurrency_safe=True)
    async def wait(tag: str) -> str:
        """The first call waits for the test; the second returns at once."""
        started.append(tag)
        if len(started) == 2:
            both_started.set()
        if tag == "a":
            await release.wait()
        return f"ok {tag}"

    app, _ = scripted_app(
        [
            combine(tool_call("c1", "wait", {"tag": "a"}), tool_call("c2", "wait", {"tag": "b"})),
            text("done"),
        ]
    )
    app.ctx.tools.register(wait)
    agent = scripted_agent(app)
    view = AgentView(agent)
    agent.followup("go")
    await both_started.wait()
    # What the tool runtime announces when c2's body settles; its result is committed only
    # after c1's, in model order.
    execution = SimpleNamespace(call_id="c2", name="wait", arguments='{"tag": "b"}', agent=agent)
    agent.ctx.emit(
        "tools/settled", SimpleNamespace(execution=execution, result=ToolResult(content="ok b"))
    )
    view.flush()
    table = view.pool_view.table.value
    assert ">running</td>" in _pool_row(table, "c1")
    done = _pool_row(table, "c2")
    assert ">done</td>" in done and "agentloop-bar-done" in done
    assert _duration_cell(done).endswith("s")
    released_at = time.time()
    release.set()
    await agent.when_idle()
    committed = next(
        e.time
        for e in agent.session.events
        if e.type == "tool/result" and e.data["call_id"] == "c2"
    )
    call = view.transcript.call("c2")
    assert call is not None and call.data["state"] == "done"
    # timed to its settling, before c1 was even released, not to its commit after c1's
    assert call.data["ended"] <= released_at < committed
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_the_cancel_button_of_a_running_call_cancels_only_that_call() -> None:
    started: dict[str, asyncio.Event] = {"slow": asyncio.Event(), "quick": asyncio.Event()}
    release = asyncio.Event()

    @tool(concurrency_safe=True)
    async def hold(tag: str) -> str:
        """Run until released (the slow one: until cancelled)."""
        started[tag].set()
        await release.wait()
        return f"ok {tag}"

    app, _model = scripted_app(
        [
            combine(
                tool_call("c1", "hold", {"tag": "slow"}), tool_call("c2", "hold", {"tag": "quick"})
            ),
            text("carried on"),
        ]
    )
    app.ctx.tools.register(hold)
    settled: dict[str, asyncio.Event] = {"c1": asyncio.Event(), "c2": asyncio.Event()}
    app.ctx.on("tools/settled", lambda payload: settled[payload.execution.call_id].set())
    agent = scripted_agent(app)
    pool = ToolPoolView(agent)
    agent.followup("go")
    await started["slow"].wait()
    await started["quick"].wait()
    pool.render()
    button = pool.cancel_button("c1")
    assert button is not None and pool.cancel_button("c2") is not None
    button.click()
    await settled["c1"].wait()
    pool.render()
    assert "cancelled" in _pool_row(pool.table.value, "c1")
    assert pool.cancel_button("c1") is None  # only running calls keep a button
    release.set()
    await agent.when_idle()
    pool.render()
    assert "done" in _pool_row(pool.table.value, "c2")
    assert pool.cancels.children == ()
    ends = [e.data["reason"]["kind"] for e in agent.session.events if e.type == "turn/end"]
    assert ends == ["completed"]
    pool.close()
    await app.aclose()


@pytest.mark.anyio
async def test_two_agents_waiting_on_the_same_call_id_are_answered_separately() -> None:
    @tool
    def danger() -> str:
        """Needs approval."""
        return "ran"

    # The offline model numbers calls per session, so two agents can ask for "c1" at once.
    script = [tool_call("c1", "danger", {}), tool_call("c1", "danger", {}), text("ok"), text("ok")]
    app, _ = scripted_app(script)
    approval = WidgetApproval()
    app.ctx.provide("approval", approval)
    app.ctx.tools.register(danger)
    app.ctx.on("tools/pre-execute", lambda execution, next: Ask(reason="risky"))
    first = app.ctx.agent_loop.create("a", AgentOptions(provider="scripted", model="m"))
    second = app.ctx.agent_loop.create("b", AgentOptions(provider="scripted", model="m"))
    both = asyncio.Event()
    _ = approval.subscribe(lambda: both.set() if len(approval.pending) == 2 else None)
    first_view, second_view = AgentView(first), AgentView(second)
    first.followup("go")
    second.followup("go")
    await asyncio.wait_for(both.wait(), 5)
    assert {p.agent for p in approval.pending} == {first, second}
    with pytest.raises(ValueError, match=r"several agents.*agent="):
        approval.approve("c1")
    buttons = second_view.pool_view.approval_buttons("c1")
    assert buttons is not None
    buttons[1].click()  # Deny, in the second agent's view: only its own request is answered
    assert [p.agent for p in approval.pending if not p.future.done()] == [first]
    assert approval.approve("c1", agent=first) is True  # one left: no agent needed
    await asyncio.wait_for(asyncio.gather(first.when_idle(), second.when_idle()), 5)

    def result(agent: Any) -> Any:
        return next(e.data for e in agent.session.events if e.type == "tool/result")

    assert result(first)["content"] == "ran"
    assert result(second)["error"]["code"] == "DENIED"
    first_view.close()
    second_view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_call_awaiting_approval_says_so_in_the_transcript_and_is_timed_without_the_wait() -> (
    None
):
    @tool
    def danger() -> str:
        """Needs approval."""
        return "ran"

    asking = await asking_view([tool_call("c1", "danger", {}), text("ok")], danger)
    app, agent, view, approval = asking.app, asking.agent, asking.view, asking.approval
    await view.settled()
    assert "danger({}) [awaiting approval]" in view.text
    assert "agentloop-tool-awaiting-approval" in view.session_view.html
    assert "awaiting approval" in _pool_row(view.pool_view.table.value, "c1")
    await asyncio.sleep(0.3)  # the person reads the call before answering: time to leave out
    assert approval.approve("c1", agent=agent) is True
    await agent.when_idle()
    await view.settled()
    events = agent.session.events
    approvals = [e for e in events if e.type == "tool/approval"]
    assert [dict(e.data) for e in approvals] == [
        {"turn": 1, "step": 1, "call_id": "c1", "state": "asked", "reason": "risky"},
        {"turn": 1, "step": 1, "call_id": "c1", "state": "approved"},
    ]
    waited = approvals[1].time - approvals[0].time
    assert waited >= 0.3
    started = next(e.time for e in events if e.type == "tool/call")
    committed = next(e.time for e in events if e.type == "tool/result")
    match = re.search(r"danger\(\{\}\) \[done\] \((\d+\.\d\d)s\)", view.text)
    assert match is not None, view.text
    shown = float(match.group(1))
    assert shown <= committed - started - waited + 0.005  # rounding to 1/100 s
    assert _duration_cell(_pool_row(view.pool_view.table.value, "c1")) == f"{shown:.2f}s"
    view.close()
    await app.aclose()
