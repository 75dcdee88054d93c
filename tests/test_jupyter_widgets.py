"""Widgets and their throttle, driven in-process (no kernel): ``SessionView``, ``ToolPoolView``,
``AgentView``, ``WidgetApproval``, ``Throttle``."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import comm
import pytest

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.jupyter import (
    AgentView,
    SessionView,
    Throttle,
    Transcript,
    WidgetApproval,
)
from agentloop_nb.jupyter._transcript import item_html, item_text
from agentloop_nb.loop import AgentOptions
from agentloop_nb.session import SessionStore
from agentloop_nb.testing import HANG, ScriptedModel, combine, text, tool_call
from agentloop_nb.tools import Ask, Deny, tool


@pytest.fixture
def comm_messages(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count every message widgets send to the front end, by message type."""
    counts: Counter[str] = Counter()
    original = comm.DummyComm.publish_msg

    def publish(self: Any, msg_type: str, *args: Any, **kwargs: Any) -> None:
        counts[msg_type] += 1
        original(self, msg_type, *args, **kwargs)

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish)
    yield counts


def _app(script: list[Any]) -> tuple[App, ScriptedModel]:
    app = App()
    model = ScriptedModel(script)
    app.ctx.llm.register_adapter(["scripted"], model)
    return app, model


def _agent(app: App) -> Any:
    return app.ctx.agent_loop.create("a", AgentOptions(provider="scripted", model="m"))


def _chunk_event(session: Any, chunk: dict[str, Any]) -> None:
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})


@pytest.mark.anyio
async def test_session_view_coalesces_10000_chunks_into_bounded_updates_with_exact_text(
    comm_messages: Counter[str],
) -> None:
    ctx = Context()
    store = SessionStore(ctx)
    session = store.create("s")
    interval = 0.02
    view = SessionView(session, interval=interval)
    comm_messages.clear()
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    pieces = [f"t{i} " for i in range(10_000)]
    start = time.monotonic()
    for i, piece in enumerate(pieces):
        _chunk_event(session, {"type": "text-delta", "index": 0, "text": piece})
        if i % 50 == 0:
            await asyncio.sleep(0)  # let the loop run, as a real stream would
    _chunk_event(session, {"type": "block-end", "index": 0})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await view.throttle.settled()
    elapsed = time.monotonic() - start

    renders_bound = elapsed / interval + 2
    assert view.throttle.renders <= renders_bound
    # one value update per render (+ the turn widget's open and the children update once)
    assert comm_messages["comm_msg"] <= renders_bound + 2
    assert view.throttle.renders < 10_000 / 10
    streamed = "".join(pieces)
    assert [i.text for i in view.transcript.items if i.kind == "assistant"] == [streamed]
    assert "agentloop-turn-end" in view.children[-1].value
    assert streamed[-20:] in view.children[-1].value


@pytest.mark.anyio
async def test_throttle_renders_at_most_once_per_interval_and_always_trails() -> None:
    seen: list[int] = []
    state = {"n": 0}
    throttle = Throttle(lambda: seen.append(state["n"]), interval=0.05)
    for n in range(1, 101):
        state["n"] = n
        throttle.poke()
    await throttle.settled()
    assert seen == [100]  # a synchronous burst collapses into one render of the final state
    state["n"] = 101
    throttle.poke()
    assert throttle.pending
    await throttle.settled()
    assert seen == [100, 101]
    throttle.close()
    throttle.poke()
    assert not throttle.pending


def test_throttle_without_a_running_loop_renders_at_once() -> None:
    seen: list[str] = []
    throttle = Throttle(lambda: seen.append("r"))
    throttle.poke()
    throttle.poke()
    assert seen == ["r", "r"]


@pytest.mark.anyio
async def test_session_view_renders_history_of_a_finished_agent_on_construction() -> None:
    app, _ = _app([text("hello <world> & co")])
    agent = _agent(app)
    agent.followup("hi <b>")
    await agent.when_idle()
    view = SessionView(agent.session)
    html = view.children[0].value
    assert 'class="agentloop-user' in html and "hi &lt;b&gt;" in html
    assert 'class="agentloop-assistant' in html and "hello &lt;world&gt; &amp; co" in html
    assert "<world>" not in html and "<b>" not in html.replace("<b>user</b>", "")
    assert 'class="agentloop-turn-end agentloop-turn-end-completed"' in html
    assert "assistant: hello <world> & co" in repr(view)
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_transcript_shows_reasoning_retries_errors_usage_and_interruptions() -> None:
    ctx = Context()
    session = SessionStore(ctx).create("s")
    view = SessionView(session)
    session.append("turn/start", {"turn": 1})
    session.append(
        "user/message",
        {
            "message": {
                "id": "m1",
                "role": "user",
                "content": [{"type": "text", "text": "go"}],
                "source": {"kind": "inject"},
            }
        },
    )
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "reasoning"})
    _chunk_event(session, {"type": "reasoning-delta", "index": 0, "text": "think"})
    session.append(
        "assistant/attempt",
        {
            "turn": 1,
            "step": 1,
            "chunks": [],
            "failure": {"kind": "error", "code": "RATE_LIMIT", "message": "slow down"},
        },
    )
    session.append("llm/retry", {"code": "RATE_LIMIT", "attempt": 1, "delay": 0.5})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "half"})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "interrupted": True,
            "message": {"role": "assistant", "content": [{"type": "text", "text": "half"}]},
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    )
    session.append(
        "turn/end", {"turn": 1, "reason": {"kind": "aborted", "cause": {"kind": "user"}}}
    )
    view.throttle.flush()
    html = view.children[-1].value
    for css in (
        "agentloop-source-inject",
        "agentloop-reasoning",
        "agentloop-error",
        "agentloop-retry",
        "agentloop-usage",
        "agentloop-interrupted",
        "agentloop-turn-end-aborted",
    ):
        assert css in html, css
    assert "<details" in html and "think" in html
    lines = view.text.splitlines()
    assert "[user/inject] go" in lines
    assert "! request error RATE_LIMIT: slow down" in lines
    assert "assistant: half [interrupted]" in lines
    assert lines[-1] == "── turn 1 ended: aborted (user) ──"


@pytest.mark.anyio
async def test_tool_pool_view_shows_parallel_calls_running_together_on_a_timeline() -> None:
    started: list[str] = []
    both_running = asyncio.Event()
    release = asyncio.Event()

    @tool(concurrency_safe=True)
    async def wait(tag: str) -> str:
        """Wait for the test to release it."""
        started.append(tag)
        if len(started) == 2:
            both_running.set()
        await release.wait()
        return f"ok {tag}"

    app, _ = _app(
        [
            combine(tool_call("c1", "wait", {"tag": "a"}), tool_call("c2", "wait", {"tag": "b"})),
            text("done"),
        ]
    )
    app.ctx.tools.register(wait)
    agent = _agent(app)
    view = AgentView(agent)
    agent.followup("go")
    await both_running.wait()
    view.flush()
    table = view.pool_view.table.value
    assert table.count("agentloop-pool-running") == 2
    assert table.count('class="agentloop-bar agentloop-bar-running"') == 2
    assert "running" in view.pool_view.text
    release.set()
    await agent.when_idle()
    await view.settled()
    table = view.pool_view.table.value
    assert table.count("agentloop-pool-done") == 2
    assert 'data-call-id="c1"' in table and 'data-call-id="c2"' in table
    assert "agentloop-status-idle" in view.status.value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_ask_shows_approve_deny_buttons_and_approve_runs_the_tool() -> None:
    @tool
    def danger(x: int) -> str:
        """Needs approval."""
        return f"ran {x}"

    app, _ = _app(
        [tool_call("c1", "danger", {"x": 1}), tool_call("c2", "danger", {"x": 2}), text("done")]
    )
    approval = WidgetApproval(timeout=30)
    app.ctx.provide("approval", approval)
    app.ctx.tools.register(danger)
    app.ctx.on("tools/pre-execute", lambda execution, next: Ask(reason="risky"))
    agent = _agent(app)
    view = AgentView(agent)
    asked = asyncio.Event()
    approval.subscribe(lambda: asked.set() if approval.pending else None)
    agent.followup("go")
    await asked.wait()
    await view.pool_view.throttle.settled()
    assert "awaiting approval" in view.pool_view.table.value
    buttons = view.pool_view.approval_buttons("c1")
    assert buttons is not None
    approve, _deny = buttons
    asked.clear()
    approve.click()
    await asked.wait()  # the second call asks in turn
    view.pool_view.approval_buttons("c2")[1].click()  # type: ignore[index]
    await agent.when_idle()
    results = {e.data["call_id"]: e.data for e in agent.session.events if e.type == "tool/result"}
    assert results["c1"]["content"] == "ran 1" and not results["c1"]["is_error"]
    assert results["c2"]["error"]["code"] == "DENIED"
    assert results["c2"]["content"] == "Error: tool call denied: the approver declined (risky)"
    assert view.pool_view.approval_buttons("c2") is None
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_agent_view_controls_follow_up_steer_inject_and_cancel() -> None:
    app, model = _app([HANG, text("after"), text("more")])
    agent = _agent(app)
    view = AgentView(agent)
    streaming = asyncio.Event()
    app.ctx.on(
        "session/event", lambda p: streaming.set() if p.event.type == "assistant/chunk" else None
    )
    view.send_button.click()
    assert "type a message first" in view.notice.value
    view.prompt.value = "first"
    view.send_button.click()
    assert agent.status == "running" and view.prompt.value == ""
    view.prompt.value = "context"
    view.inject_button.click()
    assert [m.source["kind"] for m in agent.inbox.next_step] == ["inject"]
    await streaming.wait()  # cancel a turn that is streaming
    view.cancel_button.click()
    await agent.when_idle()
    assert agent.inbox.next_step == ()
    view.prompt.value = "again"
    view.send_button.click()
    view.prompt.value = "steered"
    view.steer_button.click()
    await agent.when_idle()
    await view.settled()
    text_ = view.text
    assert "── turn 1 ended: aborted (user) ──" in text_
    assert "assistant: partial [interrupted]" in text_
    assert "[user/steer] steered" in text_ and "assistant: after" in text_
    assert "agentloop-status-idle" in view.status.value
    assert len(model.requests) == 2
    view.cancel_button.click()
    assert "nothing to cancel" in view.notice.value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_view_of_a_resumed_session_renders_history_without_rerunning(tmp_path: Any) -> None:
    app, _ = _app([text("remembered")])
    app2 = None
    try:
        app = App(persistence_root=tmp_path)
        model = ScriptedModel([text("remembered")])
        app.ctx.llm.register_adapter(["scripted"], model)
        agent = _agent(app)
        agent.followup("remember this")
        await agent.when_idle()
        sid = agent.session.id
        await app.aclose()
        app2 = App(persistence_root=tmp_path)
        model2 = ScriptedModel([])
        app2.ctx.llm.register_adapter(["scripted"], model2)
        handle = await app2.ctx.agents.resume(resume_session_id=sid)
        view = AgentView(handle.agent)
        assert "assistant: remembered" in view.text
        assert "[user] remember this" in view.text
        assert model2.requests == []
        view.close()
    finally:
        await app.aclose()
        if app2 is not None:
            await app2.aclose()


def test_transcript_folds_a_history_without_chunks() -> None:
    class E:
        def __init__(self, type: str, data: dict[str, Any]) -> None:
            self.type, self.data, self.time = type, data, 1.0

    t = Transcript()
    t.feed_all(
        [
            E("turn/start", {"turn": 1}),
            E(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "role": "assistant",
                        "content": [
                            {"type": "text", "text": "calling"},
                            {
                                "type": "tool-call",
                                "id": "c1",
                                "name": "echo",
                                "arguments": '{"a":1}',
                            },
                        ],
                    },
                },
            ),
            E(
                "tool/call",
                {"turn": 1, "step": 1, "call_id": "c1", "name": "echo", "arguments": "{}"},
            ),
            E(
                "tool/result",
                {
                    "turn": 1,
                    "step": 1,
                    "call_id": "c1",
                    "content": "x",
                    "is_error": True,
                    "error": {"code": "ABORTED", "message": "stop"},
                },
            ),
        ]
    )
    assert [i.kind for i in t.items] == ["turn-start", "assistant", "tool"]
    assert t.items[2].data["state"] == "aborted"
    assert t.pool == [t.items[2]]


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

    app, _ = _app(
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
    agent = _agent(app)
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
    # the call that ran is timed from the log: its tool/call to its tool/result
    logged = {
        (e.type, e.data["call_id"]): e.time for e in agent.session.events if "call_id" in e.data
    }
    item = view.transcript.call("c1")
    assert item is not None
    started, ended = logged[("tool/call", "c1")], logged[("tool/result", "c1")]
    assert (item.data["started"], item.data["ended"]) == (started, ended)
    assert f"[done] ({ended - started:.2f}s)" in item_text(item)
    view.close()
    await app.aclose()


def test_transcript_shows_no_duration_for_calls_refused_or_never_dispatched() -> None:
    class E:
        def __init__(self, type: str, data: dict[str, Any], time: float) -> None:
            self.type, self.data, self.time = type, data, time

    codes = {
        "u": ("UNKNOWN_TOOL", "invalid"),
        "i": ("INVALID_ARGS", "invalid"),
        "d": ("DENIED", "denied"),
        "b": ("ABORTED_BEFORE_DISPATCH", "aborted"),
        "x": ("TOOL_ERROR", "failed"),
    }
    t = Transcript()
    for call_id, (code, _) in codes.items():
        base = {"turn": 1, "step": 1, "call_id": call_id, "name": "f"}
        t.feed(E("tool/call", {**base, "arguments": "{}"}, 1.0))
        error = {"code": code, "message": "m"}
        t.feed(E("tool/result", {**base, "content": "no", "is_error": True, "error": error}, 1.3))
    calls = {i.data["call_id"]: i for i in t.items if i.kind == "tool"}
    for call_id, (_, state) in codes.items():
        item = calls[call_id]
        assert item.data["state"] == state
        shown = item_text(item)
        if call_id == "x":  # its body ran: the logged span is its duration
            assert shown == "tool f({}) [failed] (0.30s) → no"
        else:
            assert shown == f"tool f({{}}) [{state}] → no"
            assert "(0." not in item_html(item)


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
    app, _ = _app([])
    agent = await _seeded_agent(app, _seeded_pool([("c1", "instant", 1000.0, 1000.0)]))
    view = AgentView(agent)
    row = _pool_row(view.pool_view.table.value, "c1")
    assert "left:0.00%;width:100.00%" in row
    assert _duration_cell(row) == "0.00s"
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_an_instant_call_beside_a_long_one_keeps_a_visible_bar_inside_the_timeline() -> None:
    app, _ = _app([])
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

    app, model = _app([tool_call("c1", "danger", {}), text("done")])
    app.ctx.provide("approval", WidgetApproval(timeout=0.05))
    app.ctx.tools.register(danger)
    app.ctx.on("tools/pre-execute", lambda execution, next: Ask(reason="risky"))
    agent = _agent(app)
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
