"""Sub-agents: ``delegate`` runs a task on a child agent owned by the parent's scope; limits,
failures and cancellation become clear tool results; children persist and resume on their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, WAIT, data, idle, make_app, reasons, run, scripted, wait_for

from agentloop_nb.app import App
from agentloop_nb.loop import Agent, AgentOptions
from agentloop_nb.messages import UserMessage
from agentloop_nb.plugins.subagents import SubagentsPlugin
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import HANG, ScriptedModel, combine, error, text, tool_call

pytestmark = pytest.mark.anyio

KIDS = AgentOptions(provider="kids", model="k")


def delegate(call_id: str, task: str, instructions: str | None = None) -> Any:
    args: dict[str, Any] = {"task": task}
    if instructions is not None:
        args["instructions"] = instructions
    return tool_call(call_id, "delegate", args)


def task_of(options: Any) -> str:
    first = next(m for m in options.messages if isinstance(m, UserMessage))
    return "".join(getattr(b, "text", "") for b in first.content)


def kids(app: App, *entries: Any) -> ScriptedModel:
    model = ScriptedModel(entries)
    app.ctx.llm.register_adapter(["kids"], model)
    return model


def results(agent: Agent) -> list[dict[str, Any]]:
    return data(agent, "tool/result")


def children_seen(app: App) -> list[Agent]:
    seen: list[Agent] = []
    app.ctx.on(
        "agent/created",
        lambda p: (
            seen.append(p.agent) if "parent_session_id" in p.agent.session.header.meta else None
        ),
    )
    return seen


async def parent_with_subagents(app: App, *entries: Any, **limits: Any) -> Agent:
    scripted(app, *entries)
    app.ctx.plugin(SubagentsPlugin)
    handle = await app.ctx.agents.create(session_id="boss", agent_options=OPTIONS)
    limits.setdefault("agent_options", KIDS)
    if limits["agent_options"] is None:
        del limits["agent_options"]
    app.ctx.subagents.enable(handle.agent, **limits)
    return handle.agent


async def test_delegate_returns_the_childs_final_text_and_records_its_parentage() -> None:
    app = make_app()
    seen = children_seen(app)
    model = kids(app, text("42"))
    boss = await parent_with_subagents(
        app, delegate("d1", "compute the answer", "be terse"), text("the child said 42")
    )
    await run(boss, "go")
    (result,) = results(boss)
    assert (result["content"], result["is_error"]) == ("42", False)
    (child,) = seen
    meta = child.session.header.meta
    assert (meta["parent_session_id"], meta["parent_call_id"]) == ("boss", "d1")
    assert task_of(model.requests[0]) == "compute the answer"
    assert "be terse" in (model.requests[0].system or "")
    assert result["meta"]["session_id"] == child.session.id
    assert app.ctx.agents.get(child.id) is None  # disposed once it answered
    assert reasons(boss) == ["completed"]
    await app.aclose()


async def test_parallel_delegates_overlap_within_the_cap_and_the_extra_one_is_refused() -> None:
    app = make_app()
    both_running = anyio.Event()
    running: list[str] = []

    async def child_answer(options: Any) -> Any:
        running.append(task_of(options))
        if len(running) == 2:
            both_running.set()
        await both_running.wait()  # only returns once two children run at the same time
        return text(f"done: {task_of(options)}")

    kids(app, child_answer, child_answer)
    boss = await parent_with_subagents(
        app,
        combine(delegate("d1", "one"), delegate("d2", "two"), delegate("d3", "three")),
        text("summary"),
        max_children=2,
    )
    await run(boss, "fan out")
    by_call = {r["call_id"]: r for r in results(boss)}
    assert by_call["d1"]["content"] == "done: one" and by_call["d2"]["content"] == "done: two"
    assert by_call["d3"]["is_error"] and by_call["d3"]["error"]["code"] == "SUBAGENT_LIMIT"
    assert "max_children=2" in by_call["d3"]["error"]["message"]
    await app.aclose()


async def test_a_child_failure_is_an_error_result_naming_it() -> None:
    app = make_app()
    kids(app, error("BAD_REQUEST", "the child's model broke"))
    boss = await parent_with_subagents(app, delegate("d1", "try"), text("noted"))
    await run(boss, "go")
    (result,) = results(boss)
    assert result["is_error"] and result["error"]["code"] == "SUBAGENT_FAILED"
    assert "the child's model broke" in result["error"]["message"]
    assert reasons(boss) == ["completed"]
    await app.aclose()


async def test_cancelling_the_parent_cancels_its_children_with_cause_parent() -> None:
    app = make_app()
    seen = children_seen(app)
    kids(app, HANG)
    boss = await parent_with_subagents(app, delegate("d1", "wait forever"))
    boss.followup("go")
    first = await wait_for(boss, lambda e: e.type == "tool/call")
    assert first.data["name"] == "delegate"
    with anyio.fail_after(WAIT):
        while not seen:  # the child is created by the running tool body
            await anyio.lowlevel.checkpoint()
    (child,) = seen
    await wait_for(child, lambda e: e.type == "assistant/chunk")
    boss.cancel()
    await idle(boss)
    assert data(child, "turn/end")[-1]["reason"] == {
        "kind": "aborted",
        "cause": {"kind": "parent"},
    }
    assert reasons(boss) == ["aborted"]
    assert app.ctx.agents.get(child.id) is None
    await app.aclose()


async def test_disposing_the_parent_disposes_its_running_children() -> None:
    app = make_app()
    seen = children_seen(app)
    disposed: list[str] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    kids(app, HANG)
    scripted(app, delegate("d1", "wait forever"))
    app.ctx.plugin(SubagentsPlugin)
    handle = await app.ctx.agents.create(session_id="boss", agent_options=OPTIONS)
    app.ctx.subagents.enable(handle.agent, agent_options=KIDS)
    handle.agent.followup("go")
    await wait_for(handle.agent, lambda e: e.type == "tool/call")
    with anyio.fail_after(WAIT):
        while not seen:
            await anyio.lowlevel.checkpoint()
    (child,) = seen
    await wait_for(child, lambda e: e.type == "assistant/chunk")
    await handle.dispose()
    assert disposed == [child.id, "boss"]
    assert data(child, "turn/end")[-1]["reason"]["kind"] == "aborted"
    await app.aclose()


async def test_the_depth_limit_is_an_error_result_in_the_deepest_child() -> None:
    app = make_app()
    kid_model = kids(app, delegate("g1", "go deeper"), text("could not go deeper"))
    boss = await parent_with_subagents(app, delegate("d1", "nest"), text("ok"), max_depth=1)
    await run(boss, "go")
    assert results(boss)[0]["content"] == "could not go deeper"
    child_results = [
        m for m in kid_model.requests[1].messages if getattr(m, "role", None) == "tool"
    ]
    (refused,) = child_results
    assert refused.is_error and "max_depth=1" in refused.content
    await app.aclose()


async def test_children_persist_and_resume_independently(tmp_path: Path) -> None:
    app = make_app(persistence=JsonlPersistence(tmp_path))
    seen = children_seen(app)
    kids(app, text("first child answer"))
    boss = await parent_with_subagents(app, delegate("d1", "remember 7"), text("done"))
    await run(boss, "go")
    child_id = seen[0].session.id
    await app.aclose()

    app = make_app(persistence=JsonlPersistence(tmp_path))
    model = kids(app, text("it was 7"))
    handle = await app.ctx.agents.resume(resume_session_id=child_id)
    assert handle.agent.session.header.meta["parent_call_id"] == "d1"
    await run(handle.agent, "what was it?")
    assert [task_of(model.requests[0])] == ["remember 7"]
    assert data(handle.agent, "assistant/message")[-1]["message"]["content"][0]["text"] == (
        "it was 7"
    )
    assert app.ctx.agents.get("boss") is None  # the parent was not resumed with it
    await app.aclose()


@pytest.mark.parametrize("limits", [{"max_children": 0}, {"max_depth": 0}, {"max_depth": 1.5}])
async def test_enable_refuses_limits_below_one(limits: dict[str, Any]) -> None:
    app = make_app()
    app.ctx.plugin(SubagentsPlugin)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        app.ctx.subagents.enable(agent, **limits)
    await app.aclose()


async def test_the_enable_disposer_removes_delegate_from_that_agent_only() -> None:
    app = make_app()
    app.ctx.plugin(SubagentsPlugin)
    a = app.ctx.agent_loop.create("a", OPTIONS)
    b = app.ctx.agent_loop.create("b", OPTIONS)
    off = app.ctx.subagents.enable(a)
    names: Callable[[Agent], list[str]] = lambda agent: [  # noqa: E731
        t.name for t in app.ctx.tools.definitions(agent)
    ]
    assert "delegate" in names(a) and "delegate" not in names(b)
    off()
    assert "delegate" not in names(a)
    await app.aclose()


async def test_unloading_the_plugin_takes_delegate_away() -> None:
    app = make_app()
    fiber = app.ctx.plugin(SubagentsPlugin)
    a = app.ctx.agent_loop.create("a", OPTIONS)
    app.ctx.subagents.enable(a)
    assert [t.name for t in app.ctx.tools.definitions(a)] == ["delegate"]
    await fiber.aclose()
    assert app.ctx.tools.definitions(a) == []
    await app.aclose()


async def test_children_use_the_parents_options_by_default() -> None:
    app = make_app()
    seen = children_seen(app)
    boss = await parent_with_subagents(
        app,
        delegate("d1", "say hi"),
        text("hi from the child"),
        text("relayed"),
        agent_options=None,
    )
    await run(boss, "go")
    assert results(boss)[0]["content"] == "hi from the child"
    assert seen[0].options == boss.options == OPTIONS
    await app.aclose()


async def test_enable_takes_options_and_refuses_it_together_with_its_agent_options_alias() -> None:
    app = make_app()
    seen = children_seen(app)
    kids(app, text("hi from the kid"))
    boss = await parent_with_subagents(
        app, delegate("d1", "say hi"), text("relayed"), agent_options=None, options=KIDS
    )
    await run(boss, "go")
    assert results(boss)[0]["content"] == "hi from the kid"
    assert seen[0].options == KIDS != boss.options
    with pytest.raises(TypeError, match=r"got both options= and agent_options=.*options= only"):
        app.ctx.subagents.enable(boss, options=KIDS, agent_options=KIDS)
    await app.aclose()
