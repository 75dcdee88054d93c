"""The kernel's answer to the "Fix with agent" button: a ``FixAction`` from the notebook bridge
starts the fix turn on the named agent, else the most recently active notebook-enabled one,
else a new ``fixer``; the page gets a ``notice`` either way, never a traceback.

Driven in-process (an IPython shell with the extension loaded, cells run with their ids as
JupyterLab sends them) through the listener ``%load_ext`` hands the bridge; the listener's wiring
to a real comm is checked in ``test_notebook_bridge.py``, the button in the browser tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

from agentloop_nb.jupyter._fixflow import fix_listener
from agentloop_nb.jupyter._state import state
from agentloop_nb.jupyter.notebook import FixAction
from agentloop_nb.llm.offline import OfflineModel

pytestmark = pytest.mark.anyio


def _cell(sh: InteractiveShell, source: str, cell_id: str) -> Any:
    return sh.run_cell(source, store_history=True, cell_id=cell_id)


def _click(cell_id: str, agent: str = "") -> list[dict[str, Any]]:
    """What the page is told after a click on the button of ``cell_id``."""
    notices: list[dict[str, Any]] = []
    fix_listener(state(), notices.append)(
        FixAction(type="action", action="fix", cell_id=cell_id, agent=agent)
    )
    return notices


def _create(sh: InteractiveShell, line: str) -> Any:
    if "quick" not in sh.user_ns["ctx"].llm.providers():
        sh.user_ns["ctx"].llm.register_adapter(["quick"], OfflineModel(token_delay=0))
    name = line.split()[0]
    sh.run_line_magic("agent", f"create {line} --provider quick --model m")
    return sh.user_ns[name]


def _first_prompt(agent: Any) -> str:
    messages = agent.session.derive_messages()
    return "".join(getattr(b, "text", "") for b in messages[0].content) if messages else ""


async def _approve_next(agent: Any, handled: set[str]) -> Any:
    """Approve the agent's next pending call not in ``handled`` (waits for it); returns it."""
    approval = state().approval
    changed = asyncio.Event()
    off = approval.subscribe(changed.set)
    try:
        while True:
            fresh = [p for p in approval.pending_for(agent) if p.call_id not in handled]
            if fresh:
                break
            changed.clear()
            await asyncio.wait_for(changed.wait(), 10)
        handled.add(fresh[0].call_id)
        approval.approve(fresh[0].call_id, agent=agent)
        return fresh[0]
    finally:
        off()


@pytest.fixture
def broken(shell: InteractiveShell, tmp_path: Path) -> Path:
    """A notebook whose second cell uses a misspelt name; both cells ran in the shell."""
    cells = [
        nbformat.v4.new_code_cell("sales = [1, 2]", id="c-sales"),
        nbformat.v4.new_code_cell("print(sum(sale))", id="c-bad"),
    ]
    path = tmp_path / "work.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    state().notebooks.attach(path)
    _cell(shell, "sales = [1, 2]", "c-sales")
    _cell(shell, "print(sum(sale))", "c-bad")
    return path


async def test_a_click_with_no_agent_creates_a_notebook_fixer_whose_approved_fix_runs(
    shell: InteractiveShell, broken: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notices = _click("c-bad")
    assert notices == [
        {
            "type": "notice",
            "level": "info",
            "text": "created agent fixer (offline/demo, kernel and notebook tools); fixer is "
            "fixing this cell: approve its edit in its view (%agent show fixer)",
            "cell_id": "c-bad",
        }
    ]
    fixer = state().agent("fixer")
    assert shell.user_ns["fixer"] is fixer
    assert fixer.options.provider == "offline" and fixer.options.model == "demo"
    handled: set[str] = set()
    replace = await _approve_next(fixer, handled)  # the diff approval of the edit
    assert replace.name == "replace_cell"
    assert "print(sum(sales))" in (state().approval.detail_html(replace) or "")
    run = await _approve_next(fixer, handled)  # running a cell is asked for too
    assert run.name == "run_cell"
    await asyncio.wait_for(fixer.when_idle(), 10)
    prompt = _first_prompt(fixer)
    assert prompt.startswith("Error autopsy of cell") and "fix:" in prompt
    cell = nbformat.read(str(broken), as_version=4).cells[1]
    assert cell.source == "print(sum(sales))"
    assert cell.metadata["agentloop"]["agent"] == "fixer"
    assert cell.outputs[0]["text"] == "3\n"


async def test_a_click_goes_to_the_most_recently_active_notebook_enabled_agent(
    shell: InteractiveShell, broken: Path
) -> None:
    earlier = _create(shell, "earlier --notebook --edit always")
    later = _create(shell, "later --notebook --edit always")
    # The newest activity, but it may not edit cells (edit never): it cannot fix one.
    reader = _create(shell, "reader --notebook --edit never")
    for agent in (later, earlier, reader):
        agent.followup("hello")
        await asyncio.wait_for(agent.when_idle(), 10)
    notices = _click("c-bad")
    assert notices[0]["level"] == "info" and notices[0]["text"].startswith("earlier is fixing")
    await asyncio.wait_for(earlier.when_idle(), 10)
    fix_turn = [m for m in earlier.session.derive_messages() if m.role == "user"][-1]
    assert fix_turn.content[0].text.startswith("Error autopsy of cell")
    assert nbformat.read(str(broken), as_version=4).cells[1].source == "print(sum(sales))"
    assert "fixer" not in state().names  # nobody was created
    assert [len(a.session.derive_messages()) for a in (later, reader)] == [2, 2]


async def test_a_click_naming_an_agent_uses_it_even_without_notebook_tools(
    shell: InteractiveShell, broken: Path
) -> None:
    talker = _create(shell, "talker")
    notices = _click("c-bad", agent="talker")
    assert notices[0]["level"] == "info"
    assert notices[0]["text"].endswith(
        "note: talker has neither the kernel tools nor the notebook tools, so it can only "
        "explain the error (give it tools with %agent create talker --notebook)"
    )
    await asyncio.wait_for(talker.when_idle(), 10)
    assert _first_prompt(talker).startswith("Error autopsy of cell")


async def test_a_click_that_cannot_start_a_fix_tells_the_page_why_and_creates_nobody(
    shell: InteractiveShell, broken: Path
) -> None:
    _cell(shell, "print('fine')", "c-ok")
    gone = _click("c-ok")  # no failure kept (the page's button was stale)
    assert gone[0]["level"] == "error" and gone[0]["cell_id"] == "c-ok"
    assert gone[0]["text"].startswith("Fix with agent: no failure is kept for cell 'c-ok'")
    unknown = _click("c-bad", agent="nobody")
    assert unknown[0]["level"] == "error"
    assert unknown[0]["text"].startswith("no agent named 'nobody'")
    assert state().names == {}


async def test_other_actions_are_left_to_their_own_listeners(
    shell: InteractiveShell, broken: Path
) -> None:
    from agentloop_nb.jupyter.notebook import ListAction

    notices: list[dict[str, Any]] = []
    fix_listener(state(), notices.append)(ListAction(type="action", action="list"))
    assert notices == [] and state().names == {}
