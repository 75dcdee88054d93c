"""Sub-agents and forks in a real browser: a ``%%agent`` cell whose (scripted) parent delegates
to a sub-agent shows a collapsed section under the ``delegate`` call; opening it shows the
child's own transcript. Clicking "fork from here" on the finished turn forks the session and
the view names the new agent (bound in the kernel as ``boss_fork``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SETUP = """\
%load_ext agentloop_nb
from agentloop_nb import AgentOptions
from agentloop_nb.plugins.subagents import SubagentsPlugin
from agentloop_nb.testing import ScriptedModel, text, tool_call

boss_script = [tool_call("d1", "delegate", {"task": "what is 6*7"}), text("the child said 42")]
ctx.llm.register_adapter(["scripted"], ScriptedModel(boss_script))
ctx.llm.register_adapter(["kids"], ScriptedModel([text("forty-two, from the child")]))
ctx.plugin(SubagentsPlugin)"""

CELLS = [
    SETUP,
    "%agent create boss --provider scripted --model m",
    "ctx.subagents.enable(boss, agent_options=AgentOptions(provider='kids', model='k'))",
    "%%agent boss\nask a sub-agent",
]


def test_a_delegate_call_nests_its_child_view_and_fork_from_here_names_the_fork(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("subagent-view") as folder:
        notebook = harness.write_notebook(folder / "subagents.ipynb", CELLS)
        harness.run_all(lab_page, jupyter_lab, notebook)
        harness.wait_cells_done(lab_page, timeout=120_000)
        assert harness.error_outputs(lab_page) == []
        view = harness.cell_output(lab_page, 3).locator(".agentloop-agent")
        expect(view.locator(".agentloop-assistant").last).to_contain_text(
            "the child said 42", timeout=60_000
        )

        # The finished call's section is collapsed: no child view on screen yet (the call's
        # result, the child's final text, shows in the call as usual).
        toggle = view.locator("button.agentloop-child-toggle")
        expect(toggle).to_have_count(1)
        expect(toggle).to_contain_text("▸ sub-agent: what is 6*7")
        expect(view.locator(".agentloop-child-view")).to_have_count(0)

        # "fork from here" on the finished turn (the running turn has none; the child's view
        # is still closed, so this is the parent's only button).
        fork = view.locator("button.agentloop-fork")
        expect(fork).to_have_count(1)
        expect(fork).to_contain_text("fork from here")
        fork.click()
        notice = view.locator(".agentloop-fork-notice")
        expect(notice).to_contain_text("as boss_fork", timeout=60_000)
        expect(notice).to_contain_text("use boss_fork")

        # Open the section: the child's own transcript, task and answer.
        toggle.click()
        child = view.locator(".agentloop-child-view")
        expect(child).to_have_count(1)
        expect(child.locator(".agentloop-user")).to_contain_text("what is 6*7")
        expect(child.locator(".agentloop-assistant")).to_contain_text("forty-two, from the child")
        expect(toggle).to_contain_text("▾")
        assert harness.error_outputs(lab_page) == []
