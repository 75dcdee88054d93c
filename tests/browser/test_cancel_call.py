"""A per-call Cancel button in a real browser: clicking it in the tool pool of a ``%%agent``
cell's view ends that call ``cancelled`` while the turn goes on to its answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SETUP = '''\
%load_ext agentloop_nb
from agentloop_nb.testing import ScriptedModel, combine, text, tool_call
from agentloop_nb.tools import ToolExecution, tool

@tool(concurrency_safe=True)
async def hold(tag: str, execution: ToolExecution) -> str:
    """Run until this call is cancelled (the quick one returns at once)."""
    if tag != "quick":
        await execution.signal.wait()
    return f"ended {tag}"

ctx.tools.register(hold)
calls = combine(tool_call("c1", "hold", {"tag": "slow"}), tool_call("c2", "hold", {"tag": "quick"}))
ctx.llm.register_adapter(["scripted"], ScriptedModel([calls, text("carried on without it")]))'''

CELLS = [SETUP, "%agent create t --provider scripted --model m", "%%agent t\ngo"]


def test_a_per_call_cancel_button_cancels_that_call_and_the_turn_goes_on(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("cancel-call") as folder:
        notebook = harness.write_notebook(folder / "cancel.ipynb", CELLS)
        harness.run_all(lab_page, jupyter_lab, notebook)
        harness.wait_cells_done(lab_page, timeout=120_000)
        assert harness.error_outputs(lab_page) == []
        view = harness.cell_output(lab_page, 2).locator(".agentloop-agent")
        button = view.locator("button.agentloop-cancel-call")
        expect(button).to_have_count(1, timeout=60_000)  # only the slow call is still running
        expect(button).to_contain_text("Cancel hold")
        button.click()
        row = view.locator('.agentloop-pool-row[data-call-id="c1"]')
        expect(row).to_contain_text("cancelled", timeout=60_000)
        expect(view.locator(".agentloop-assistant").last).to_contain_text(
            "carried on without it", timeout=60_000
        )
        expect(button).to_have_count(0)
