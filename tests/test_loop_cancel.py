"""Cancellation: the turn signal, partial answers, synthetic results, the wake latch, causes,
keep_inbox, idle no-op, disposal."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _loop_helpers import (
    OPTIONS,
    Probe,
    chunk_text,
    data,
    idle,
    is_type,
    make_app,
    new_agent,
    reasons,
    register,
    run,
    scripted,
    types,
    user_texts,
    wait_for,
    wait_for_abort,
    wait_for_chunk,
)

from agentloop_nb.app import App
from agentloop_nb.testing import HANG, combine, error, hang_after, text, tool_call

pytestmark = pytest.mark.anyio


def end_reason(agent: Any, index: int = -1) -> dict[str, Any]:
    return dict(data(agent, "turn/end")[index]["reason"])


async def start_hanging(app: App, *more: Any, content: str = "hi") -> Any:
    """An agent whose first answer streams ``partial`` and hangs; returns once it is hanging."""
    agent, model = new_agent(app, HANG, *more)
    agent.followup(content)
    await wait_for(agent, chunk_text("partial"))
    return agent, model


async def test_cancel_while_idle_is_a_no_op(app: App) -> None:
    agent, _ = new_agent(app)
    pending = agent.inject("keep me")
    before = len(agent.session.events)
    assert agent.cancel() is False
    assert len(agent.session.events) == before and agent.inbox.next_step == (pending,)


async def test_cancel_keeps_the_partial_answer_as_an_interrupted_message(app: App) -> None:
    agent, model = await start_hanging(app, text("after"))
    assert agent.cancel() is True
    await idle(agent)
    assert end_reason(agent) == {"kind": "aborted", "cause": {"kind": "user"}}
    (message,) = data(agent, "assistant/message")
    assert message["interrupted"] is True
    assert message["message"]["content"] == ({"type": "text", "text": "partial"},)
    assert types(agent)[-3:] == ["assistant/message", "step/end", "turn/end"]
    await run(agent, "next")
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "user"]
    assert reasons(agent) == ["aborted", "completed"]


async def test_a_half_streamed_tool_call_is_dropped(app: App) -> None:
    ran: list[str] = []
    register(app, _recording_tool(ran))
    partial = tool_call("c1", "record", {"text": "x"}, text="let me")[:-4]  # one args delta
    agent, _model = new_agent(app, hang_after(partial))
    agent.followup("go")
    # Streamed live: the log holds a tool-call block only once it ends.
    await wait_for_chunk(agent, lambda c: c["type"] == "tool-call-delta")
    agent.cancel()
    await idle(agent)
    (message,) = data(agent, "assistant/message")
    assert message["interrupted"] is True
    assert [b["type"] for b in message["message"]["content"]] == ["text"]
    assert "tool/call" not in types(agent) and ran == []


def _recording_tool(ran: list[str]) -> Any:
    from agentloop_nb.tools import tool

    @tool
    def record(text: str) -> str:
        """Record."""
        ran.append(text)
        return text

    return record


async def test_the_signal_reaches_hooks_and_a_hook_returning_late_does_not_open_a_step(
    app: App,
) -> None:
    agent, model = new_agent(app, text("never"))
    seen: list[Any] = []
    entered = anyio.Event()

    async def slow_pre_step(payload: Any, next: Any) -> Any:
        entered.set()
        seen.append(await payload.signal.wait())
        return await next()  # answers although the turn was cancelled

    app.ctx.on("agent/pre-step", slow_pre_step)
    agent.followup("hi")
    with anyio.fail_after(5):
        await entered.wait()
    agent.cancel({"kind": "hook", "reason": "budget"})
    await idle(agent)
    assert end_reason(agent) == {"kind": "aborted", "cause": {"kind": "hook", "reason": "budget"}}
    assert seen == [{"kind": "hook", "reason": "budget"}]
    assert model.requests == [] and "step/start" not in types(agent)


async def test_a_hook_that_ignores_the_signal_cannot_hold_the_turn_open(app: App) -> None:
    agent, _ = new_agent(app, text("never"))
    entered = anyio.Event()

    async def stubborn(payload: Any, next: Any) -> Any:
        entered.set()
        await anyio.Event().wait()  # never returns on its own
        return await next()

    app.ctx.on("agent/request", stubborn)
    agent.followup("hi")
    with anyio.fail_after(5):
        await entered.wait()
    agent.cancel()
    await idle(agent)
    assert reasons(agent) == ["aborted"]
    assert types(agent)[-2:] == ["step/end", "turn/end"]


@pytest.mark.parametrize(
    "hook",
    [
        "system-prompt/assemble",
        "agent/pre-step",
        "agent/request",
        "agent/request-error",
        "agent/turn-stopping",
    ],
)
async def test_every_loop_hook_is_interrupted_by_cancel_even_when_it_ignores_the_signal(
    app: App, hook: str
) -> None:
    first = error("OVERLOADED", "busy") if hook == "agent/request-error" else text("done")
    agent, _ = new_agent(app, first, text("never"))
    entered = anyio.Event()

    async def stubborn(*_args: Any) -> Any:
        entered.set()
        await anyio.Event().wait()  # never returns on its own

    app.ctx.on(hook, stubborn, prepend=True)  # ahead of the retry plugin
    agent.followup("hi")
    with anyio.fail_after(5):
        await entered.wait()
    agent.cancel()
    await idle(agent)
    assert end_reason(agent) == {"kind": "aborted", "cause": {"kind": "user"}}
    assert types(agent)[-1] == "turn/end"


async def test_the_signal_reaches_tool_bodies_and_unstarted_calls_get_synthetic_pairs(
    app: App,
) -> None:
    register(app, wait_for_abort)
    script = combine(
        tool_call("c1", "wait_for_abort", {}),
        tool_call("c2", "wait_for_abort", {}),
        tool_call("c3", "wait_for_abort", {}),
    )
    agent, model = new_agent(app, script)
    agent.followup("go")
    await wait_for(agent, is_type("tool/call", call_id="c1"))
    agent.cancel()
    await idle(agent)
    results = {d["call_id"]: d for d in data(agent, "tool/result")}
    assert results["c1"]["content"] == "stopped: user"  # started: drained to its real result
    for cid in ("c2", "c3"):
        assert results[cid]["is_error"] is True
        assert results[cid]["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
        assert results[cid]["content"] == "Error: tool call aborted before dispatch"
    assert [d["call_id"] for d in data(agent, "tool/call")] == ["c1", "c2", "c3"]
    assert reasons(agent) == ["aborted"] and len(model.requests) == 1


async def test_cancel_in_a_rolling_pool_drains_started_calls_and_starts_no_more(
    app: App,
) -> None:
    probe = Probe()
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 2
    script = combine(*(tool_call(f"c{i}", "probe", {"key": f"k{i}"}) for i in range(1, 5)))
    agent, _ = new_agent(app, script)
    agent.followup("go")
    await probe.wait_started("k1", "k2")
    agent.cancel()
    await idle(agent)
    assert not probe.is_started("k3") and probe.active == 0
    codes = [d.get("error", {}).get("code") for d in data(agent, "tool/result")]
    assert codes == ["ABORTED", "ABORTED", "ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"]


def _unanswered(agent: Any) -> list[str]:
    """Calls of the assistant messages or ``tool/call`` events without a ``tool/result``."""
    asked = [c["id"] for m in data(agent, "assistant/message") for c in _tool_calls(m)]
    logged = [d["call_id"] for d in data(agent, "tool/call")]
    answered = {d["call_id"] for d in data(agent, "tool/result")}
    return [cid for cid in dict.fromkeys(asked + logged) if cid not in answered]


def _tool_calls(message: Any) -> list[Any]:
    return [b for b in message["message"]["content"] if b["type"] == "tool-call"]


async def test_a_driver_cancelled_without_an_abort_answers_the_lone_running_call(
    app: App,
) -> None:
    probe = Probe()
    register(app, probe.probe)
    agent, _ = new_agent(app, tool_call("c1", "probe", {"key": "k1"}))
    agent.followup("go")
    await probe.wait_started("k1")
    (driver,) = app.supervisor.tasks
    driver.cancel()  # App teardown by the supervisor: no abort reaches the signal
    await idle(agent)
    assert end_reason(agent) == {"kind": "disposed"} and _unanswered(agent) == []
    (result,) = data(agent, "tool/result")
    assert result["error"]["code"] == "ABORTED" and "task was cancelled" in result["content"]


async def test_a_pool_cancelled_without_an_abort_answers_every_call_even_one_started_after_it(
    app: App,
) -> None:
    # Three workers: w1 runs c1's body, w2 holds the start lock in c2's pre-execute, w3 waits
    # on the lock. Releasing w2 and cancelling the driver in one go lets w3 take the lock it
    # was woken for (its wait is over, so the cancel scope does not interrupt it) and log
    # c3's tool/call after the cancel; it stops at c3's body. All of them, and c4/c5 that
    # never started, must be answered before the turn closes.
    probe = Probe()
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 3
    script = combine(*(tool_call(f"c{i}", "probe", {"key": f"k{i}"}) for i in range(1, 6)))
    agent, _ = new_agent(app, script)
    in_pre, release_pre = anyio.Event(), anyio.Event()

    async def pre(execution: Any, next: Any) -> Any:
        if execution.call_id == "c2":
            in_pre.set()
            await release_pre.wait()
        return await next()

    app.ctx.on("tools/pre-execute", pre)
    agent.followup("go")
    await probe.wait_started("k1")
    await in_pre.wait()
    await anyio.wait_all_tasks_blocked()  # w3 is queued on the lock
    assert [d["call_id"] for d in data(agent, "tool/call")] == ["c1", "c2"]
    (driver,) = app.supervisor.tasks
    before = len(agent.session.events)
    release_pre.set()
    driver.cancel()
    await idle(agent)
    after = [(e.type, e.data.get("call_id")) for e in agent.session.events[before:]]
    assert after[0] == ("tool/call", "c3")  # the interleaving under test happened
    assert not probe.is_started("k4") and probe.active == 0
    assert end_reason(agent) == {"kind": "disposed"} and _unanswered(agent) == []
    codes = [(d["call_id"], d["error"]["code"]) for d in data(agent, "tool/result")]
    assert codes == [
        ("c1", "ABORTED"),
        ("c2", "ABORTED"),
        ("c3", "ABORTED"),
        ("c4", "ABORTED_BEFORE_DISPATCH"),
        ("c5", "ABORTED_BEFORE_DISPATCH"),
    ]


async def test_cancel_clears_both_inbox_lists_with_a_canceled_outcome(app: App) -> None:
    agent, _ = await start_hanging(app)
    discarded: list[str] = []
    app.ctx.on("agent/inbox/discarded", lambda p: discarded.append(p.message.text))
    agent.send("queued", wakeup=False)
    agent.inject("context")
    agent.cancel()
    await idle(agent)
    assert agent.inbox.next_turn == () and agent.inbox.next_step == ()
    assert sorted(discarded) == ["context", "queued"]
    cleared = [dict(d) for d in data(agent, "agent/inbox/spliced") if d.get("outcome")]
    assert {(d["target"], d["removed_count"], d["outcome"]) for d in cleared} == {
        ("next-turn", 1, "canceled"),
        ("next-step", 1, "canceled"),
    }


async def test_cancel_with_keep_inbox_keeps_pending_input_for_later(app: App) -> None:
    agent, _model = await start_hanging(app, text("later"), text("go on"))
    agent.send("queued", wakeup=False)
    agent.cancel(keep_inbox=True)
    await idle(agent)
    assert [m.text for m in agent.inbox.next_turn] == ["queued"]
    assert reasons(agent) == ["aborted"]  # an aborted turn does not start the queued one
    await run(agent, "go")
    assert user_texts(agent, 2) == ["queued"] and user_texts(agent, 3) == ["go"]
    assert reasons(agent) == ["aborted", "completed", "completed"]


async def test_a_waking_send_after_the_abort_is_latched_and_replayed(app: App) -> None:
    agent, model = await start_hanging(app, text("replayed"))

    def on_event(p: Any) -> None:
        if p.event.type == "turn/end" and p.event.data["turn"] == 1:
            agent.followup("after abort")  # after the abort, before the driver is idle

    app.ctx.on("session/event", on_event)
    agent.cancel()
    await idle(agent)
    assert reasons(agent) == ["aborted", "completed"]
    assert user_texts(agent, 2) == ["after abort"] and len(model.requests) == 2


async def test_a_send_right_after_cancel_runs_in_a_fresh_turn(app: App) -> None:
    agent, _model = await start_hanging(app, text("fresh"))
    agent.cancel()
    agent.followup("right away")
    await idle(agent)
    assert reasons(agent) == ["aborted", "completed"]
    assert user_texts(agent, 2) == ["right away"]


async def test_the_first_cause_wins(app: App) -> None:
    agent, _ = await start_hanging(app)
    agent.cancel("parent")
    agent.cancel("user")
    await idle(agent)
    assert end_reason(agent) == {"kind": "aborted", "cause": {"kind": "parent"}}


async def test_a_cancel_governs_exactly_one_turn(app: App) -> None:
    agent, model = await start_hanging(app, text("two"), text("three"))
    agent.cancel()
    await idle(agent)
    await run(agent, "again")
    await run(agent, "and again")
    assert reasons(agent) == ["aborted", "completed", "completed"]
    assert not model.requests[1].signal.aborted


async def test_a_disposed_cancel_ends_the_turn_disposed_and_does_not_latch(app: App) -> None:
    agent, model = await start_hanging(app, text("later"))

    def on_event(p: Any) -> None:
        if p.event.type == "turn/end":
            agent.followup("too late")

    off = app.ctx.on("session/event", on_event)
    agent.cancel("disposed")
    await idle(agent)
    off()
    assert end_reason(agent) == {"kind": "disposed"}
    assert types(agent).count("turn/start") == 1 and len(model.requests) == 1


@pytest.mark.parametrize("cause", ["nobody", 3, {"reason": "x"}])
async def test_an_unknown_cause_is_refused(app: App, cause: Any) -> None:
    agent, _ = await start_hanging(app)
    with pytest.raises((ValueError, TypeError), match="cause"):
        agent.cancel(cause)
    agent.cancel()
    await idle(agent)


async def test_cancel_during_turn_stopping_ends_the_turn_aborted(app: App) -> None:
    agent, _ = new_agent(app, text("done"))

    async def stop_here(payload: Any) -> None:
        payload.agent.cancel()
        await payload.signal.wait()

    app.ctx.on("agent/turn-stopping", stop_here)
    await run(agent)
    assert reasons(agent) == ["aborted"]
    assert types(agent)[-3:] == ["assistant/message", "step/end", "turn/end"]


async def test_app_aclose_mid_turn_ends_the_turn_disposed(app: App) -> None:
    other = make_app()
    scripted(other, HANG)
    agent = other.ctx.agent_loop.create("a", OPTIONS)
    agent.followup("hi")
    await wait_for(agent, chunk_text("partial"))
    await other.aclose()
    assert end_reason(agent) == {"kind": "disposed"} and agent.status == "idle"
    assert data(agent, "assistant/message")[0]["interrupted"] is True


async def test_a_cancel_before_the_driver_first_runs_still_opens_and_aborts_that_turn(
    app: App,
) -> None:
    agent, model = new_agent(app, text("after"))
    statuses: list[str] = []
    app.ctx.on("agent/status", lambda p: statuses.append(p.status))
    agent.followup("first")
    agent.cancel()  # the driver task exists but has not run yet
    await idle(agent)
    assert types(agent)[-2:] == ["turn/start", "turn/end"] and model.requests == []
    assert end_reason(agent) == {"kind": "aborted", "cause": {"kind": "user"}}
    assert statuses == ["running", "idle"] and agent.inbox.next_turn == ()
    agent.followup("again")  # the aborted turn does not poison the next one
    await idle(agent)
    assert reasons(agent) == ["aborted", "completed"] and user_texts(agent, 2) == ["again"]
    assert not model.requests[0].signal.aborted


async def test_a_send_latched_before_the_driver_first_runs_is_replayed_after_the_aborted_turn(
    app: App,
) -> None:
    agent, model = new_agent(app, text("latched"))
    agent.followup("first")
    agent.cancel()
    agent.followup("latched send")  # after the abort, before the driver ever ran
    await idle(agent)
    assert reasons(agent) == ["aborted", "completed"]
    assert user_texts(agent, 1) == [] and user_texts(agent, 2) == ["latched send"]
    assert len(model.requests) == 1


async def test_keep_inbox_cancel_of_an_idle_wake_aborts_its_turn_and_holds_the_prompt(
    app: App,
) -> None:
    agent, model = new_agent(app, text("one"), text("two"))
    agent.followup("queued")
    agent.cancel(keep_inbox=True)  # lands before the turn starts: it opens and ends aborted
    await idle(agent)
    assert reasons(agent) == ["aborted"] and [m.text for m in agent.inbox.next_turn] == ["queued"]
    agent.followup("wake")
    await idle(agent)
    assert reasons(agent) == ["aborted", "completed", "completed"] and len(model.requests) == 2
    assert user_texts(agent, 2) == ["queued"] and user_texts(agent, 3) == ["wake"]


async def test_a_dispose_before_the_driver_first_runs_opens_and_ends_that_turn_disposed(
    app: App,
) -> None:
    agent, model = new_agent(app, text("never"))
    agent.followup("first")
    await app.agent_loop.dispose(agent)  # lands before the driver task ever ran
    assert types(agent)[-2:] == ["turn/start", "turn/end"] and model.requests == []
    assert end_reason(agent) == {"kind": "disposed"} and agent.status == "idle"
    with pytest.raises(RuntimeError, match="disposed"):
        agent.followup("too late")
