"""The Agents panel's kernel side (``agentloop_nb.jupyter._panel``) and ``%agent panel``, in an
in-process shell: the roster rows and their states, the panel's actions (create, prompt with
references in each mode, cancel, list) as the notebook bridge delivers them, the ``agents``
push, and the ipywidgets panel for front ends without the extension. The same actions over a
real kernel's comm are in test_agents_panel_kernel.py; the JupyterLab panel in
tests/browser/test_agents_panel.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import agentloop_nb.jupyter as J
from agentloop_nb.jupyter._panel import AgentsPanel, PanelError, ref_text
from agentloop_nb.jupyter._state import state
from agentloop_nb.jupyter.magics._panel import PanelWidget
from agentloop_nb.jupyter.notebook import (
    CancelAction,
    CellRef,
    CreateAction,
    ListAction,
    PromptAction,
)
from agentloop_nb.llm.offline import OfflineModel
from agentloop_nb.plugins.budgets import BudgetPlugin
from agentloop_nb.testing import HANG, ScriptedModel, text

pytestmark = pytest.mark.anyio


class FakeBridge:
    """What the panel uses of ``NotebookBridge``: ``connected``, ``push``, ``on_action``."""

    def __init__(self) -> None:
        self.connected = True
        self.pushed: list[dict[str, Any]] = []
        self.listeners: list[Any] = []

    def push(self, message: dict[str, Any]) -> None:
        self.pushed.append(message)

    def on_action(self, callback: Any) -> Any:
        self.listeners.append(callback)
        return lambda: self.listeners.remove(callback)

    def send(self, action: Any) -> None:
        for listener in list(self.listeners):
            listener(action)


def scripted(shell: Any, *script: Any) -> ScriptedModel:
    model = ScriptedModel(script)
    shell.user_ns["ctx"].llm.register_adapter(["scripted"], model)
    return model


def quick(shell: Any) -> None:
    shell.user_ns["ctx"].llm.register_adapter(["quick"], OfflineModel(token_delay=0))


async def next_loop_turn() -> None:
    # The roster coalesces changes with loop.call_soon: one yield lets that callback run.
    await asyncio.sleep(0)


async def pending(approval: Any) -> Any:
    """Wait (on the approval service's own notification) until a request is pending."""
    ready = asyncio.Event()
    off = approval.subscribe(lambda: approval.pending and ready.set())
    try:
        if not approval.pending:
            await asyncio.wait_for(ready.wait(), 10)
    finally:
        off()
    return approval.pending[0]


def user_blocks(agent: Any) -> list[list[str]]:
    """The text blocks of every logged user message, in order."""
    out = []
    for event in agent.session.events:
        if event.type == "user/message":
            content = event.data["message"]["content"]
            out.append([b["text"] for b in content] if not isinstance(content, str) else [content])
    return out


@pytest.fixture
def panel(shell: Any) -> tuple[AgentsPanel, FakeBridge]:
    bridge = FakeBridge()
    p = AgentsPanel(state(), bridge)  # type: ignore[arg-type]
    yield p, bridge
    p.close()


async def test_rows_list_name_state_model_turns_tokens_and_cost_of_every_agent(
    shell: Any,
) -> None:
    scripted(shell, text("hello"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    shell.run_line_magic("agent", "create b")
    a = shell.user_ns["a"]
    a.followup("hi")
    await a.when_idle()
    rows = {r.name: r for r in state().panel.rows()}
    assert list(rows) == ["a", "b"]
    assert (rows["a"].state, rows["a"].model, rows["a"].turns) == ("idle", "scripted/m", 1)
    assert rows["a"].tokens == 15 and rows["a"].cost is None  # 10 in + 5 out; no price for m
    assert (rows["b"].model, rows["b"].turns, rows["b"].tokens) == ("offline/demo", 0, 0)
    assert rows["a"].view == ""  # view ids only when asked: listing builds no widgets
    with_views = state().panel.rows(views=True)
    assert with_views[0].view == J.view(a).model_id


async def test_a_row_says_running_awaiting_approval_and_paused_by_budget(shell: Any) -> None:
    quick(shell)
    shell.run_line_magic("agent", "create a --kernel --provider quick --model m")
    a = shell.user_ns["a"]
    st = state()
    a.followup("run: 40 + 2")
    assert st.panel.rows()[0].state == "running"
    request = await pending(st.approval)
    assert st.panel.rows()[0].state == "awaiting approval"
    st.approval.approve(request.call_id)
    await a.when_idle()
    assert st.panel.rows()[0].state == "idle"

    shell.user_ns["ctx"].plugin(BudgetPlugin)
    shell.user_ns["ctx"].budgets.set(a, max_tokens=1)
    a.followup("hello")
    request = await pending(st.approval)
    assert request.name == "budget"
    assert st.panel.rows()[0].state == "paused by budget"
    st.approval.deny(request.call_id)
    await a.when_idle()


async def test_create_makes_a_notebook_agent_with_the_default_provider_under_a_free_name(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge]
) -> None:
    p, bridge = panel
    shell.user_ns["agent"] = "a user's variable"  # never clobbered
    bridge.send(CreateAction(type="action", action="create"))
    bridge.send(CreateAction(type="action", action="create"))
    assert shell.user_ns["agent"] == "a user's variable"
    first, second = shell.user_ns["agent2"], shell.user_ns["agent3"]
    assert (first.options.provider, first.options.model) == ("offline", "demo")
    tools = {d.name for d in first.ctx.tools.definitions(first)}
    assert {"run_python", "list_cells", "read_cell", "replace_cell"} <= tools
    assert [r.name for r in p.rows()] == ["agent2", "agent3"] and second.status == "idle"


async def test_create_uses_the_configured_default_provider_and_model(
    shell: Any, tmp_path: Any
) -> None:
    shell.run_line_magic("unload_ext", "agentloop_nb.jupyter")
    await J.wait_closed()
    J.configure(persistence_root=tmp_path / "s2", default_provider="quick", default_model="m2")
    shell.run_line_magic("load_ext", "agentloop_nb.jupyter")
    quick(shell)
    name = state().panel.create()
    agent = shell.user_ns[name]
    assert (agent.options.provider, agent.options.model) == ("quick", "m2")
    shell.run_line_magic("agent", "create plain")
    assert shell.user_ns["plain"].options.provider == "quick"  # %agent create follows it too
    with pytest.raises(ValueError, match="needs default_provider"):
        J.configure(default_model="m")


async def test_a_prompt_with_references_is_logged_like_an_agent_cell_with_the_refs_first(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge]
) -> None:
    _, bridge = panel
    model = scripted(shell, text("one"), text("two"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    ref = {"cell_id": "c-7", "position": 3, "lines": [2, 4], "text": "x = 1\ny = 2\nz = 3"}
    out = {"cell_id": "c-8", "position": 4, "output": 0, "text": "ValueError: bad"}
    bridge.send(
        PromptAction.model_validate(
            {"type": "action", "action": "prompt", "agent": "a", "text": "why?", "refs": [ref, out]}
        )
    )
    await a.when_idle()
    shell.run_cell_magic("agent", "a", "and now?")
    await a.when_idle()
    first, second = user_blocks(a)
    assert first[-1] == "why?" and second == ["and now?"]
    assert first[0].startswith(
        "The user selected this in cell 3 (id c-7), lines 2-4 of the notebook (read_cell "
    )
    assert first[0].endswith("```\nx = 1\ny = 2\nz = 3\n```")
    assert first[1].startswith("The user selected this in output 1 of cell 4 (id c-8)")
    # Logged exactly as %%agent logs: the same event, the same source (none), a new turn.
    messages = [e.data["message"] for e in a.session.events if e.type == "user/message"]
    assert messages[0].get("source") == messages[1].get("source")
    assert [m.role for m in model.requests[0].messages] == ["user"]


async def test_a_selected_secret_reaches_neither_the_model_nor_the_log(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge]
) -> None:
    _, bridge = panel
    secret = "sk-live-panel-secret-0042"
    shell.user_ns["OPENAI_API_KEY"] = secret
    model = scripted(shell, text("rotate it"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    line = {"cell_id": "c-1", "position": 1, "lines": [1, 1], "text": f'KEY = "{secret}"'}
    printed = {"cell_id": "c-1", "position": 1, "output": 0, "text": secret}
    bridge.send(
        PromptAction.model_validate(
            {
                "type": "action",
                "action": "prompt",
                "agent": "a",
                "text": "is this safe?",
                "refs": [line, printed],
            }
        )
    )
    await a.when_idle()
    (blocks,) = user_blocks(a)
    assert 'KEY = "[secret]"' in blocks[0] and "```\n[secret]\n```" in blocks[1]
    assert secret not in json.dumps([e.data for e in a.session.events], default=str)
    assert secret not in repr(model.requests[0].messages)


async def test_steer_reaches_the_running_turn_and_inject_waits_for_the_next_step(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge]
) -> None:
    p, _ = panel
    scripted(shell, HANG, text("done"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    p.prompt("a", "start")
    p.prompt("a", "go left", mode="steer")
    p.prompt("a", "fyi: it rains", mode="inject")
    kinds = [m.source["kind"] for m in a.inbox.next_step]
    assert kinds == ["steer", "inject"]
    assert p.cancel("a") is True
    await a.when_idle()
    assert p.cancel("a") is False
    ends = [e.data["reason"]["kind"] for e in a.session.events if e.type == "turn/end"]
    assert ends == ["aborted"]


async def test_a_cancel_action_stops_the_running_turn(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge]
) -> None:
    _, bridge = panel
    scripted(shell, HANG)
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    a.followup("wait")
    assert a.status == "running"
    bridge.send(CancelAction(type="action", action="cancel", agent="a"))
    await a.when_idle()
    assert [e.data["reason"] for e in a.session.events if e.type == "turn/end"] == [
        {"kind": "aborted", "cause": {"kind": "user"}}
    ]


async def test_bad_actions_are_logged_not_raised_and_direct_calls_raise_panel_errors(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge], caplog: pytest.LogCaptureFixture
) -> None:
    p, bridge = panel
    bridge.send(CancelAction(type="action", action="cancel", agent="ghost"))
    bridge.send(PromptAction(type="action", action="prompt", agent="ghost", text="hi"))
    assert [r.getMessage() for r in caplog.records] == [
        "agents panel: no agent named 'ghost' in this kernel (known: none)"
    ] * 2
    shell.run_line_magic("agent", "create a")
    with pytest.raises(PanelError, match="the prompt is empty"):
        p.prompt("a", "   ")
    with pytest.raises(PanelError, match="unknown prompt mode 'shout'"):
        p.prompt("a", "hi", mode="shout")  # type: ignore[arg-type]
    with pytest.raises(PanelError, match=r"known: a\)"):
        p.cancel("b")


async def test_changes_are_pushed_once_per_loop_turn_and_list_always_answers(
    shell: Any, panel: tuple[AgentsPanel, FakeBridge]
) -> None:
    p, bridge = panel
    shell.run_line_magic("agent", "create a")
    shell.run_line_magic("agent", "create b")
    await next_loop_turn()
    assert len(bridge.pushed) == 1  # two creations, one push
    (message,) = bridge.pushed
    assert message["type"] == "agents"
    assert [(r["name"], r["state"], r["model"]) for r in message["agents"]] == [
        ("a", "idle", "offline/demo"),
        ("b", "idle", "offline/demo"),
    ]
    assert message["agents"][0]["view"] == J.view(shell.user_ns["a"]).model_id
    p.changed()
    await next_loop_turn()
    assert len(bridge.pushed) == 1  # nothing changed: nothing sent
    bridge.send(ListAction(type="action", action="list"))
    assert len(bridge.pushed) == 2 and bridge.pushed[1] == message  # a new page asked
    shell.run_line_magic("agent", "dispose b")
    await state().drain()
    await next_loop_turn()
    assert [r["name"] for r in bridge.pushed[-1]["agents"]] == ["a"]
    bridge.connected = False
    shell.run_line_magic("agent", "create c")
    await next_loop_turn()
    assert [r["name"] for r in bridge.pushed[-1]["agents"]] == ["a"]  # nobody to tell


def test_a_reference_names_its_place_and_is_cut_when_long() -> None:
    line = ref_text(CellRef(cell_id="k", position=1, lines=(5, 5), text="x"))
    assert line.startswith("The user selected this in cell 1 (id k), line 5 of the notebook")
    long = ref_text(CellRef(cell_id="k", text="y" * 5000))
    assert "in a cell (id k)" in long and "… (1000 more characters)" in long
    empty = ref_text(CellRef(cell_id="k", position=2))
    assert empty.endswith("(read_cell shows the whole cell).")


async def test_agent_panel_magic_shows_the_roster_live_creates_sends_and_stops(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    scripted(shell, HANG)
    shell.run_line_magic("agent", "panel")
    assert "no agents in this kernel" in capsys.readouterr().out
    widget = PanelWidget(state())
    assert widget.create_button in widget.children and "No agent" in widget.empty.value
    widget.create_button.click()
    agent = shell.user_ns["agent"]
    assert widget.picker.value == "agent"
    assert widget.view_box.children == (J.view(agent),)  # the same model the cell shows
    assert "<td><b>agent</b></td><td>idle</td><td>offline/demo</td>" in widget.table.value
    shell.run_line_magic("agent", "create s --provider scripted --model m")
    await next_loop_turn()
    assert widget.picker.options == ("agent", "s") and widget.picker.value == "agent"
    widget.picker.value = "s"
    widget.prompt.submit("think hard")  # what Enter does in the front end
    assert widget.prompt.value == ""
    s = shell.user_ns["s"]
    await next_loop_turn()
    assert "<td><b>s</b></td><td>running</td>" in widget.table.value
    widget.stop_button.click()
    await s.when_idle()
    assert user_blocks(s) == [["think hard"]]
    widget.stop_button.click()
    assert "s is idle: nothing to cancel" in widget.notice.value
    widget.send_button.click()
    assert "the prompt is empty" in widget.notice.value
    assert repr(widget).splitlines()[1].split() == [
        "NAME",
        "STATE",
        "MODEL",
        "TURNS",
        "TOKENS",
        "COST",
    ]
    assert widget.prompt.enter_sends
    widget.close()
