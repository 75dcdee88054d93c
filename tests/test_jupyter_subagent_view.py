"""The parent's view nests a live view of each sub-agent under its ``delegate`` call, and every
finished turn offers "fork from here": driven in-process through the public widgets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pytest
from _loop_helpers import finished_turns

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.jupyter import AgentView, SessionView, WidgetApproval
from agentloop_nb.jupyter._state import KernelState
from agentloop_nb.loop import AgentOptions
from agentloop_nb.plugins.subagents import SubagentsPlugin
from agentloop_nb.session import SessionStore
from agentloop_nb.testing import HANG, ScriptedModel, text, tool_call

BOSS = AgentOptions(provider="scripted", model="m")
KIDS = AgentOptions(provider="kids", model="k")


def delegate(call_id: str, task: str) -> Any:
    return tool_call(call_id, "delegate", {"task": task})


async def boss_with_subagents(app: App, *entries: Any, kids: list[Any]) -> Any:
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel(entries))
    app.ctx.llm.register_adapter(["kids"], ScriptedModel(kids))
    app.ctx.plugin(SubagentsPlugin)
    handle = await app.ctx.agents.create(session_id="boss", agent_options=BOSS)
    app.ctx.subagents.enable(handle.agent, agent_options=KIDS)
    return handle.agent


class Gate:
    """A script entry that waits until ``open()`` before answering ``reply`` (and says when a
    request reached it)."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.reached = asyncio.Event()
        self._open = asyncio.Event()

    async def __call__(self, _options: Any) -> Any:
        self.reached.set()
        await self._open.wait()
        return self.reply

    def open(self) -> None:
        self._open.set()


def section_position(view: SessionView, call_id: str) -> tuple[tuple[Any, ...], int]:
    """The children of the turn box holding call ``call_id``'s section, and its index."""
    section = view.child_section(call_id)
    for box in view.body.children:
        if section in box.children:
            return tuple(box.children), box.children.index(section)
    raise AssertionError(f"no section for {call_id} in the view")


@pytest.mark.anyio
async def test_a_running_delegate_call_shows_its_child_live_then_collapses_when_done() -> None:
    app = App()
    gate = Gate(text("the child says 42"))
    boss = await boss_with_subagents(
        app, delegate("d1", "compute the answer"), text("parent done"), kids=[gate]
    )
    view = AgentView(boss)
    boss.followup("go")
    await asyncio.wait_for(gate.reached.wait(), 5)
    view.flush()
    sv = view.session_view
    section = sv.child_section("d1")
    assert section is not None and section.opened  # open while the call runs
    children, at = section_position(sv, "d1")
    assert "delegate" in children[at - 1].value  # right under its call
    child = section.view
    assert isinstance(child, SessionView)
    assert child.session.header.meta["parent_call_id"] == "d1"
    assert "compute the answer" in child.text and "compute the answer" in child.html
    assert child.fork_button(1) is None  # running: no fork button yet
    assert section.toggle.description == "▾ sub-agent: compute the answer"
    assert section.toggle.tooltip == f"session {child.session.id}"
    gate.open()
    await boss.when_idle()
    await view.settled()
    view.flush()
    assert not section.opened  # collapsed once the child finished
    assert "the child says 42" in section.text  # its final state stays
    assert "the child says 42" in child.html  # rendered before it stopped following
    section.expand()
    assert section.view is child and child in section.children
    assert "parent done" in view.text
    # The static copy a saved notebook keeps holds the child's transcript under its call.
    static = view.static_html()
    start = static.index('<details class="agentloop-box agentloop-child-static">')
    end = static.index("</details>", start)
    block = static[start:end]
    assert "<summary>sub-agent: compute the answer</summary>" in block
    assert "agentloop-user" in block and "the child says 42" in block
    assert "turn 1 ended: completed" in block and "parent done" in static[end:]
    # The finished turn keeps the section under the call.
    children, at = section_position(sv, "d1")
    assert "delegate" in children[at - 1].value and "parent done" in children[at + 1].value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_after_a_restart_the_resumed_parent_finds_its_child_in_the_store(
    tmp_path: Path,
) -> None:
    app = App(persistence_root=tmp_path)
    boss = await boss_with_subagents(
        app, delegate("d1", "compute"), text("done"), kids=[text("stored child answer")]
    )
    boss.followup("go")
    await boss.when_idle()
    await app.aclose()

    again = App(persistence_root=tmp_path)
    again.ctx.llm.register_adapter(["scripted"], ScriptedModel([]))
    resumed = (await again.ctx.agents.resume(resume_session_id="boss")).agent
    view = AgentView(resumed)
    section = view.session_view.child_section("d1")
    assert section is not None and not section.opened and section.view is None  # lazy
    assert section.session_id is not None and section.session_id.startswith("boss-sub-")
    section.expand()
    assert section.view is not None
    assert "stored child answer" in section.view.text
    assert section.view.session.header.meta["parent_session_id"] == "boss"
    view.close()
    await again.aclose()


@pytest.mark.anyio
async def test_a_stored_child_that_cannot_be_read_says_why_in_its_section(
    tmp_path: Path,
) -> None:
    app = App(persistence_root=tmp_path)
    boss = await boss_with_subagents(app, delegate("d1", "x"), text("done"), kids=[text("c")])
    boss.followup("go")
    await boss.when_idle()
    (result,) = [e.data for e in boss.session.events if e.type == "tool/result"]
    child_file = app.persistence.path(result["meta"]["session_id"])
    await app.aclose()
    lines = child_file.read_text(encoding="utf-8").splitlines(keepends=True)
    child_file.write_text(lines[0] + "{not json\n" + "".join(lines[1:]), encoding="utf-8")

    again = App(persistence_root=tmp_path)
    resumed = (await again.ctx.agents.resume(resume_session_id="boss")).agent
    view = SessionView(resumed.session)
    section = view.child_section("d1")
    assert section is not None
    section.expand()  # raises nothing: the reason is shown in the section
    assert section.view is None
    assert "cannot be loaded" in section.text and "corrupt session record" in section.text
    view.close()
    await again.aclose()


@pytest.mark.anyio
async def test_a_child_that_is_gone_says_so_in_its_section() -> None:
    app = App()  # no persistence: a view built after the child was disposed cannot load it
    boss = await boss_with_subagents(app, delegate("d1", "x"), text("done"), kids=[text("c")])
    boss.followup("go")
    await boss.when_idle()
    view = SessionView(boss.session)
    section = view.child_section("d1")
    assert section is not None
    section.expand()
    assert section.view is None
    assert "is gone" in section.text and "persistence is off" in section.text
    view.close()
    await app.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("stored", [False, True], ids=["live", "stored"])
async def test_grandchildren_nest_inside_their_parents_child_view(
    tmp_path: Path, stored: bool
) -> None:
    app = App(persistence_root=tmp_path) if stored else App()
    boss = await boss_with_subagents(
        app,
        delegate("d1", "ask a grandchild"),
        text("boss done"),
        kids=[delegate("g1", "go deeper"), text("grandchild answer"), text("child done")],
    )
    view = SessionView(boss.session) if not stored else None
    boss.followup("go")
    await boss.when_idle()
    if view is None:  # built from the stored sessions alone
        view = SessionView(boss.session)
    view.flush()
    section = view.child_section("d1")
    assert section is not None
    section.expand()
    child = section.view
    assert child is not None and "child done" in child.text
    grand = child.child_section("g1")
    assert grand is not None and not grand.opened
    grand.expand()
    assert grand.view is not None and "grandchild answer" in grand.view.text
    assert grand.view.session.header.meta["subagent_depth"] == 2
    view.close()
    assert child.throttle.pending is False and grand.view.throttle.pending is False
    await app.aclose()


@pytest.mark.anyio
async def test_closing_the_parent_view_closes_child_views_and_their_subscriptions() -> None:
    app = App()
    gate = Gate(text("late"))
    boss = await boss_with_subagents(app, delegate("d1", "wait"), text("done"), kids=[gate])
    watched = ("session/created", "session/event", "tools/settled")
    before_view = {name: app.ctx.has_listeners(name) for name in watched}
    view = SessionView(boss.session)
    boss.followup("go")
    await asyncio.wait_for(gate.reached.wait(), 5)
    view.flush()
    section = view.child_section("d1")
    assert section is not None and section.view is not None
    child = section.view
    child_session = child.session
    assert all(app.ctx.has_listeners(name) for name in watched)
    view.close()
    # Closed: the widgets' comms are gone and the child's events reach no view any more.
    assert child.comm is None and section.comm is None and view.comm is None
    assert {name: app.ctx.has_listeners(name) for name in watched} == before_view
    before = child.transcript.events_seen
    gate.open()
    await boss.when_idle()
    assert len(child_session.events) > before
    assert child.transcript.events_seen == before
    await app.aclose()


@pytest.mark.anyio
async def test_fork_from_here_forks_at_the_end_of_that_turn_and_names_the_new_agent() -> None:
    app = App()
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel([text("one"), text("two")]))
    agent = app.agent_loop.create("a", BOSS)
    names: list[Any] = []
    view = AgentView(agent, on_fork=lambda new: names.append(new) or "branch")
    for prompt in ("first", "second"):
        agent.followup(prompt)
        await agent.when_idle()
    view.flush()
    sv = view.session_view
    button = sv.fork_button(1)
    assert isinstance(button, widgets.Button) and "fork from here" in button.description
    button.click()  # what the browser's click does
    await sv.settled()
    (fork,) = names
    first_end = next(e.seq for e in agent.session.events if e.type == "turn/end")
    assert fork.session.header.meta["forked_from"] == agent.session.id
    assert fork.session.header.meta["at_seq"] == first_end
    assert [m.text for m in fork.session.derive_messages()] == ["first", "one"]
    notice = sv.fork_notice(1)
    assert "branch" in notice and f"seq {first_end}" in notice
    assert "branch" in " ".join(w.value for w in sv.body.children[0].children[-1:])
    assert app.ctx.agents.get(fork.id) is fork  # the App owns it, not the source agent
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_the_running_turn_has_no_fork_button_and_an_ended_one_has() -> None:
    app = App()
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel([text("one"), HANG]))
    agent = app.agent_loop.create("a", BOSS)
    view = SessionView(agent.session)
    agent.followup("first")
    await agent.when_idle()
    agent.followup("second")
    while "partial" not in view.transcript.text():
        await asyncio.sleep(0)  # yield until the hanging answer streams (bounded by the timeout)
    view.flush()
    assert view.fork_button(1) is not None and view.fork_button(2) is None
    assert view.fork_turn(2) is None and "has not ended" in view.fork_notice(2)
    agent.cancel("user")
    await agent.when_idle()
    view.flush()
    assert view.fork_button(2) is not None
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_refused_fork_shows_why_in_the_view_and_raises_nothing() -> None:
    app = App()
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel([text("one")]))
    agent = app.agent_loop.create("a", BOSS)
    agent.followup("first")
    await agent.when_idle()
    view = SessionView(agent.session)

    def veto(payload: Any) -> None:
        if payload.session.header.meta.get("forked_from"):
            raise PermissionError("forks are not allowed here")

    app.ctx.on("session/created", veto)
    task = view.fork_turn(1)
    assert task is not None
    assert await task is None
    assert "fork from turn 1 failed: forks are not allowed here" in view.fork_notice(1)
    assert [a.id for a in app.agent_loop.list()] == [agent.id]
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_fork_from_a_notebook_view_is_bound_to_a_free_name() -> None:
    app = App()
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel([text("one")]))
    state = KernelState(None, app, WidgetApproval())
    agent = app.agent_loop.create("bob", BOSS)
    state.bind("bob", agent)
    state.bind("bob_fork", agent)  # taken: the fork gets the next free name
    agent.followup("hello")
    await agent.when_idle()
    view = state.view(agent)
    view.flush()
    task = view.session_view.fork_turn(1)
    assert task is not None
    fork = await task
    assert state.names["bob_fork2"] is fork
    assert "as bob_fork2: use bob_fork2" in view.session_view.fork_notice(1)
    state.close()
    await app.aclose()


def _models(root: widgets.Widget) -> int:
    """The widget models a view is made of (children, layouts and styles, each once)."""
    seen: set[str] = set()
    stack: list[Any] = [root]
    while stack:
        w = stack.pop()
        if not isinstance(w, widgets.Widget) or w.model_id in seen:
            continue
        seen.add(w.model_id)
        for name in w.keys:
            value = getattr(w, name, None)
            if isinstance(value, widgets.Widget):
                stack.append(value)
            elif isinstance(value, list | tuple):
                stack.extend(value)
    return len(seen)


def test_a_1000_turn_history_costs_three_widget_models_per_turn_fork_buttons_included() -> None:
    session = finished_turns(SessionStore(Context()).create("s"), 1000)
    view = SessionView(session)
    assert all(view.fork_button(n) is not None for n in range(1, 1001))
    # Per turn: its box, its HTML and its button (layouts and styles are shared).
    assert _models(view) <= 3 * 1000 + 30
    view.close()
